"""Checks of user-facing arguments, shared by Trainer, PopulationTrainer and the strategies.

Arguments often arrive from a YAML file or the command line (omegaconf), where
a typo is a string (``logger=flase``), a number stands for a switch
(``enable_checkpointing=100``) or a list is a ``ListConfig``. Each helper here
returns the value in its one accepted form or raises ValueError naming the
argument, the value and what is accepted: nothing is guessed from truthiness.
"""

from __future__ import annotations

import difflib
import numbers
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

DEVICES_FORMS = ("'auto', a positive int n (the first n devices; also as a string such as '4'), "
                 "a list of distinct device indices such as [0, 2] (also as a string such as "
                 "'0,2'), or a list of distinct jax.Device objects")


class ArgumentError(ValueError):
    """A bad argument: ``<name>=<value!r><tail>``, e.g. ``PPOConfig.lr='fast':
    expected a non-negative number``, raised by the checks here. It keeps its
    parts, so a caller that knows where the user typed the argument (a recipe:
    the ``algorithm:`` section of its config) names that key instead
    (:meth:`typed`).

    Attributes:
      key: the argument's own name: a keyword (``iso_sigma``) or a config field (``lr``).
      value: the value given.
      tail: what the message says after the value (``": expected a positive int"``).
      owner: the config class whose field ``key`` is (``"PPOConfig"``), or ``""``.
      part: what the name holds after ``key``: an item (``"[1]"``), a sub-key (``".torso"``).
    """

    def __init__(self, key: str, value: Any, tail: str, owner: str = "", part: str = "") -> None:
        super().__init__(f"{owner}{'.' if owner else ''}{key}{part}={value!r}{tail}")
        self.key, self.value, self.tail, self.owner, self.part = key, value, tail, owner, part

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # copy.copy keeps the parts
        return type(self), (self.key, self.value, self.tail, self.owner, self.part)

    def typed(self, key: str) -> ArgumentError:
        """The same error naming ``key`` (``algorithm.lr``) in place of ``owner.key``."""
        return ArgumentError(key, self.value, self.tail, part=self.part)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``word``
    ignoring case (:func:`difflib.get_close_matches`: ``PMAP`` finds ``pmap``),
    or ``""`` when none is close."""
    by_lower: dict[str, str] = {}
    for choice in map(str, choices):
        by_lower.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def closest(word: str, choices: Iterable[str], n: int = 5) -> list[str]:
    """Up to ``n`` of ``choices`` closest to ``word`` ignoring case, best first
    (:func:`difflib.get_close_matches` with a low cutoff, so a word that is
    close to nothing still gets the least distant names)."""
    by_lower: dict[str, str] = {}
    for choice in map(str, choices):
        by_lower.setdefault(choice.lower(), choice)
    return [by_lower[c] for c in difflib.get_close_matches(str(word).lower(), list(by_lower),
                                                             n=n, cutoff=0.2)]


def positive_int(name: str, value: Any, allow_none: bool = True) -> int | None:
    """``value`` as a positive int (``None`` passes when ``allow_none``).

    A whole float such as ``5e5`` (how YAML reads it) becomes an int; bools,
    strings and fractional numbers are rejected.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_, numbers.Integral)) \
            and float(value).is_integer():
        value = int(value)  # 5e5 (YAML reads it as a float) is a whole number
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArgumentError(name, value, ": expected a positive int" + (" or None" if allow_none else ""))
    return int(value)


def integer(name: str, value: Any) -> int:
    """``value`` as an int (a seed: any sign); bools, floats and strings raise
    ValueError naming the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentError(name, value, ": expected an int")
    return int(value)


def expand_path(value: str | os.PathLike) -> str:
    """``value`` with ``~`` (the user's home) and environment variables (``$RUNS``,
    ``${RUNS}``) expanded, as a shell would: every path the project takes goes
    through it, so ``default_root_dir="~/runs"`` never makes a directory named ``~``."""
    return os.path.expandvars(os.path.expanduser(os.fspath(value)))


def directory(name: str, value: Any) -> str:
    """``value`` as a directory path (:func:`expand_path`) that exists as a directory or
    can be created: checked before anything is written, so a path that is (or
    runs through) an existing file fails here, not as an ``OSError`` mid-run.

    Raises:
      ValueError: not a ``str`` / ``os.PathLike``, or the path or one of its
        parents is an existing file (the message names both).
    """
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentError(name, value, ": expected a directory path (a str or os.PathLike)")
    path = expand_path(value)
    for p in [path, *map(str, pathlib.Path(path).parents)]:
        if os.path.exists(p) and not os.path.isdir(p):
            where = "is" if p == path else f"is under {p!r}, which is"
            raise ArgumentError(name, path, f": {where} an existing file; expected a directory "
                                "(existing or to be created)")
    return path


def flag(name: str, value: Any, also: tuple[str, ...] = (), hint: str = "") -> bool | str:
    """An on/off argument: ``True`` or ``False`` (or one of the strings in ``also``).

    Only real bools count (omegaconf reads ``true``/``false`` as bools): a
    string such as ``"flase"`` or ``"wandb"``, or a number such as ``100``, is
    an error rather than "on".
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value in also:
        return value
    choices = ["True", "False", *map(repr, also)]
    raise ArgumentError(name, value, f": expected {', '.join(choices[:-1])} or {choices[-1]} "
                        "(a bool: true or false in a config file or on the command line)"
                        + (f"; {hint}" if hint else ""))


def _index_list(raw: Any, items: list[Any]) -> list[int]:
    if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral) for i in items):
        raise ArgumentError("devices", raw,
                            ": a list must hold only device indices (ints) or only "
                            f"jax.Device objects; expected {DEVICES_FORMS}")
    indices = [int(i) for i in items]
    if any(i < 0 for i in indices):
        raise ArgumentError("devices", raw, f": device indices are >= 0; expected {DEVICES_FORMS}")
    if len(set(indices)) != len(indices):
        raise ArgumentError("devices", raw, f": repeated device index; expected {DEVICES_FORMS}")
    return indices


def devices(value: Any) -> int | str | list:
    """The ``devices`` argument in one of its accepted forms.

    Returns ``"auto"``, a positive int (a count: the first ``n`` devices), a
    list of distinct non-negative ints (device indices, as Lightning's
    ``devices=[0, 2]``) or a list of distinct ``jax.Device``. Digit strings
    become ints (``"4"`` -> 4) and comma-separated ones index lists (``"0,2"`` ->
    ``[0, 2]``); any sequence (a tuple, omegaconf's ``ListConfig``) becomes a
    list. Whether the indices exist is checked when the strategy picks its
    devices (before anything compiles).

    Raises:
      ValueError: anything else (a bool, a float, a mapping such as a
        ``DictConfig``, zero or a negative count, an empty list, a negative or
        repeated index, a list mixing indices and devices); the message names
        the value and the accepted forms.
    """
    import jax

    raw = value
    if isinstance(value, str):
        text = value.strip()
        if text == "auto":
            return "auto"
        if text.isdigit():
            value = int(text)
        elif "," in text and all(p.strip().isdigit() for p in text.split(",") if p.strip()) \
                and any(p.strip() for p in text.split(",")):
            return _index_list(raw, [int(p) for p in text.split(",") if p.strip()])
        else:
            raise ArgumentError("devices", raw, f": expected {DEVICES_FORMS}")
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentError("devices", raw,
                            f": a bool is not a device count; expected {DEVICES_FORMS}")
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise ArgumentError("devices", raw,
                                f": a device count must be >= 1; expected {DEVICES_FORMS}")
        return int(value)
    if isinstance(value, numbers.Number):
        raise ArgumentError("devices", raw,
                            ": a device count must be a whole number; "
                            f"expected {DEVICES_FORMS}")
    if isinstance(value, Mapping):
        raise ArgumentError("devices", raw,
                            ": a mapping (e.g. an omegaconf DictConfig) selects no "
                            f"devices; expected {DEVICES_FORMS}")
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise ArgumentError("devices", raw, f": expected {DEVICES_FORMS}")
    items = list(value)
    if not items:
        raise ArgumentError("devices", raw,
                            f": an empty list selects no device; expected {DEVICES_FORMS}")
    if all(isinstance(d, jax.Device) for d in items):
        if len(set(items)) != len(items):
            raise ArgumentError("devices", raw, f": repeated device; expected {DEVICES_FORMS}")
        return items
    return _index_list(raw, items)


def installed_platforms() -> list[str]:
    """The JAX platforms this installation can start, without starting any: ``cpu``,
    plus one per installed accelerator plugin (``cuda`` for ``jax-cuda12-plugin``,
    ``rocm``, ``tpu`` for ``libtpu``)."""
    import importlib.metadata
    import importlib.util

    found = ["cpu"]
    for entry in importlib.metadata.entry_points(group="jax_plugins"):
        found += [kind for kind in ("cuda", "rocm", "tpu") if kind in entry.name]
    if importlib.util.find_spec("libtpu") is not None:
        found.append("tpu")
    return list(dict.fromkeys(found))


def check_platforms() -> None:
    """Check, before anything starts JAX, that ``JAX_PLATFORMS`` names a platform this
    installation can start (``cuda`` on a CPU-only install makes JAX raise a bare
    ``AssertionError`` from inside the first library that makes an array). Starts
    no backend, so a multi-process run can still initialise ``jax.distributed`` first.

    Raises:
      ValueError: none of the requested platforms is installed (naming them, the
        installed ones, and what to unset or install).
    """
    requested = [p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    installed = installed_platforms()
    usable = set(installed) | ({"gpu"} if {"cuda", "rocm"} & set(installed) else set())
    if not requested or usable & set(requested):
        return
    wanted = ",".join(requested)
    raise ValueError(
        f"JAX_PLATFORMS={wanted!r}: JAX cannot start {wanted} here; installed: "
        f"{', '.join(installed)}. Unset JAX_PLATFORMS (or set it to cpu) to run on the CPU; "
        "for NVIDIA GPUs install the CUDA build of JAX (pip install -e \".[cuda12]\" in a "
        "checkout, or pip install \"jax[cuda12]\") on a machine with a driver")


CPU_COLLECTIVES_ENV = "JAX_CPU_COLLECTIVES_IMPLEMENTATION"  # JAX's own variable
CPU_COLLECTIVES = ("gloo", "mpi")
MPI_LIBRARY_ENV = "MPITRAMPOLINE_LIB"


def check_collectives() -> None:
    """Check, before anything imports JAX, the collectives variables JAX reads
    at import: an unknown ``JAX_CPU_COLLECTIVES_IMPLEMENTATION`` makes ``import
    jax`` raise a traceback without the choices, and an ``MPITRAMPOLINE_LIB``
    that names no file makes jaxlib's MPI loader end the process at ``import
    jax`` (whatever the collectives) with only its own line.

    Raises:
      ValueError: either variable is wrong (naming it, its value and the fix).
    """
    value = os.environ.get(CPU_COLLECTIVES_ENV)
    if value and value not in CPU_COLLECTIVES:
        raise ValueError(f"{CPU_COLLECTIVES_ENV}={value!r}: expected one of "
                         f"{', '.join(map(repr, CPU_COLLECTIVES))} (or unset: gloo)")
    library = os.environ.get(MPI_LIBRARY_ENV)
    if library and not os.path.isfile(library):
        raise ValueError(f"{MPI_LIBRARY_ENV}={library!r} names no file: jaxlib loads it when "
                         "JAX starts (MPI collectives through MPItrampoline). Point it to the "
                         "libmpiwrapper.so MPIwrapper built, or unset it to use gloo")


def pick_devices(requested: int | str | list, available: list, owner: str) -> list:
    """The devices ``requested`` (a value returned by :func:`devices`) selects
    from ``available``, in the order given.

    Raises:
      ValueError: a count or an index beyond ``available``, or a device not in
        it; the message names ``owner`` (the strategy) and the choices.
    """
    import jax

    if requested == "auto":
        return list(available)
    if isinstance(requested, int):
        if requested > len(available):
            kind = available[0].platform if available else "no"
            cpu = (f" (the CPU shows as one device: XLA_FLAGS=--xla_force_host_platform_device_count"
                   f"={requested} before JAX starts splits it into {requested})"
                   if kind == "cpu" and len(available) == 1 else "")
            raise ArgumentError("devices", requested,
                                f": this process has {len(available)} {kind} "
                                f"device(s) (for {owner}); choose 1..{len(available)}{cpu}")
        return list(available[:requested])
    if all(isinstance(d, jax.Device) for d in requested):
        missing = [d for d in requested if d not in available]
        if missing:
            raise ArgumentError("devices", requested,
                                f": {missing} not among the {len(available)} "
                                f"device(s) available to {owner}: {list(available)}")
        return list(requested)
    bad = [i for i in requested if i >= len(available)]
    if bad:
        raise ArgumentError("devices", requested,
                            f": no device index {bad[0]}: {len(available)} device(s) "
                            f"are available to {owner} (indices 0..{len(available) - 1})")
    return [available[i] for i in requested]


def non_negative_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    """``value`` as an int >= 0 (``None`` passes when ``allow_none``); a whole float
    becomes an int and bools are rejected, as in :func:`positive_int`."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
            or not float(value).is_integer() or value < 0:
        raise ArgumentError(name, value, ": expected an int >= 0" + (" or None" if allow_none else ""))
    return int(value)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if high is None:
        if low is None:
            return "a number"
        if low == 0 and not low_open:
            return "a non-negative number"
        return f"a number {'>' if low_open else '>='} {low}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high}"
    return f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def number(name: str, value: Any, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, allow_none: bool = False) -> Any:
    """``value`` unchanged when it is a real number (not a bool) within the bounds:
    ``low``/``high`` (``None``: unbounded), excluded when ``low_open``/``high_open``;
    ``None`` passes when ``allow_none``.

    Raises:
      ValueError: anything else, naming the value and the accepted interval
        (``low=0`` alone reads "a non-negative number").
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise ArgumentError(name, value, f": expected {_interval(low, high, low_open, high_open)}"
                            + (" or None" if allow_none else ""))
    return value


def one_of(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``; else ValueError listing them."""
    if isinstance(value, str) and value in choices:
        return value
    raise ArgumentError(name, value, f": choose one of {', '.join(map(repr, choices))}")


def sizes(name: str, value: Any) -> tuple[int, ...]:
    """Layer widths: a sequence (a list, a tuple, omegaconf's ``ListConfig``) of
    positive ints as a tuple (whole floats become ints); may be empty."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ArgumentError(name, value, ": expected a list of positive ints")
    widths = []
    for i, v in enumerate(value):
        try:
            widths.append(positive_int(name, v, allow_none=False))
        except ArgumentError as e:
            raise ArgumentError(name, v, e.tail, part=f"[{i}]") from None
    return tuple(widths)


def check_fields(config: Any, check: Any, names: Sequence[str], **kwargs: Any) -> None:
    """Check and normalise fields of a frozen dataclass in its ``__post_init__``.

    Each field ``name`` in ``names`` becomes ``check(name, value, **kwargs)`` (one
    of the helpers above); its :class:`ArgumentError` names the config class and
    field, e.g. ``PPOConfig.lr='abc': expected a non-negative number`` (``owner``
    ``PPOConfig``, ``key`` ``lr``).
    """
    for name in names:
        try:
            value = check(name, getattr(config, name), **kwargs)
        except ArgumentError as e:
            raise field_error(config, e.key, e.value, e.tail, e.part) from None
        object.__setattr__(config, name, value)


def field_error(config: Any, key: str, value: Any, tail: str, part: str = "") -> ArgumentError:
    """The :class:`ArgumentError` of field ``key`` of ``config`` (a config class's
    instance): ``<Class>.<key><part>=<value!r><tail>``."""
    return ArgumentError(key, value, tail, type(config).__name__, part)


def fewer_devices(value: int, num_devices: int) -> str:
    """``", or devices=3 (the most devices that divide 6)"``: the largest device
    count below ``num_devices`` that divides ``value``, for a size that does not
    split over all the devices (all of them are what ``strategy="auto"`` takes)."""
    most = max(d for d in range(1, num_devices) if value % d == 0)
    return f", or devices={most} (the most devices that divide {value})"


def split_over_devices(owner: str, num_devices: int, *, multiple: int = 1,
                       multiple_of: str = "", **values: int) -> None:
    """Raise ValueError naming the first of ``values`` (global sizes such as
    ``num_envs=6``) that is not a multiple of ``num_devices``:
    ``"{owner}: num_envs=6 is not divisible by the 4 devices; use a multiple of 4, or
    devices=3 (the most devices that divide 6)"``,
    or whose share of a device is not a multiple of ``multiple`` (an env whose
    batches hold whole games: ``multiple_of`` says what, e.g. ``"the 3 agents of
    a game"``)."""
    for name, value in values.items():
        if value % num_devices:
            raise ValueError(f"{owner}: {name}={value} is not divisible by the {num_devices} "
                             f"devices; use a multiple of {num_devices}{fewer_devices(value, num_devices)}")
        if (value // num_devices) % multiple:
            raise ValueError(f"{owner}: {name}={value} gives {value // num_devices} env(s) a "
                             f"device, not a multiple of {multiple_of or multiple}; use a "
                             f"multiple of {multiple * num_devices}")
