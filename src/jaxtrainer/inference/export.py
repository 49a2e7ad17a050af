"""A trained policy as a file that runs without jaxtrainer: StableHLO through
``jax.export``, or ONNX through jax2onnx, with a model card beside it.

::

    jaxtrainer export runs/ppo/version_0 --format stablehlo -o cartpole.stablehlo
    jaxtrainer export runs/ppo/version_0 --format onnx -o cartpole.onnx   # pip install 'jaxtrainer[onnx]'
    jaxtrainer.load_policy("runs/ppo/version_0").export("cartpole.stablehlo")   # export_policy

The exported function is the greedy policy :class:`~jaxtrainer.Policy` runs
without a key, whole: observation normalisation with the checkpoint's
statistics, the network, then the argmax (discrete), the tanh squash or the
clip to the action bounds (continuous). It takes raw observations as the
environment returns them, ``obs[batch, *observation_shape]`` in the
environment's observation dtype, with a dynamic ``batch``, and returns
``actions[batch, ...]`` (``int32[batch]`` for a discrete action space,
``float32[batch, action_size]`` for a continuous one). A policy with memory
(a recurrent core) takes its carry after the observation and returns the next
carry after the action, one array per carry leaf (a ``gru`` core: one
``float32[batch, core_size]``; an ``lstm``: two); zeros start an episode.

StableHLO: ``jax.export.deserialize(bytearray(open(file, "rb").read())).call(obs)``
in any JAX program (lowered for CPU, CUDA and TPU). ONNX: inputs ``obs`` (and
``carry_<i>``), outputs ``action`` (and ``next_carry_<i>``), for onnxruntime.

The model card (``<file>.json``): the format, the inputs and outputs, the
observation and action spaces, the env, the run directory and checkpoint, the
algorithm, the member of a population, the return the run reached (its
``metrics.csv``), and the jaxtrainer and JAX versions.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.util
import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.extend
import numpy as np
from omegaconf import DictConfig, OmegaConf

from jaxtrainer._arguments import expand_path
from jaxtrainer.checkpoint.resolve import run_dir_of
from jaxtrainer.policy import Policy
from jaxtrainer.rundir.run_layout import CONFIG_FILE, METRICS_FILE, MODULE_FILE
from jaxtrainer.rundir.storage import check_writable, replace_file

FORMATS = ("stablehlo", "onnx")
"""The formats :func:`export_policy` writes."""

_ONNX_EXTRA = "jaxtrainer[onnx]"
"""The extra that installs the ONNX converter (jax2onnx, onnx, onnxruntime)."""

_PLATFORMS = ("cpu", "cuda", "tpu")
"""The platforms a StableHLO file is lowered for (it runs on any of them)."""

_ONNX_OPSET = 23
"""The ONNX opset an ONNX file uses (jax2onnx's default)."""

BATCH = "batch"
"""The name of the dynamic batch dimension, in both formats and the card."""

_RETURN_METRICS = ("eval/episode_return", "train/episode_return")
"""What the card reports as the return the run reached, the first logged of these
(a population member's own ``member/<i>/...`` column first)."""

_NEEDS = {"stablehlo": (("flatbuffers", "flatbuffers"),),  # jax.export's serialization
          "onnx": (("jax2onnx", _ONNX_EXTRA), ("onnx", _ONNX_EXTRA))}


def check_format(format: Any) -> str:
    """``format`` if :data:`FORMATS` holds it and what writes it is installed.

    Raises:
      ValueError: an unknown format (naming it and the formats).
      ImportError: a package the format needs is missing (naming what installs it).
    """
    if format not in FORMATS:
        raise ValueError(f"format {format!r}: expected one of {', '.join(FORMATS)}")
    for module, install in _NEEDS[format]:
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"exporting to {format} needs {module}, which is not installed: "
                              f"pip install '{install}'")
    return format


def card_path(file: str | os.PathLike) -> Path:
    """Where the model card of ``file`` goes: ``<file>.json``."""
    return Path(f"{os.fspath(file)}.json")


def check_output(file: str | os.PathLike) -> Path:
    """``file`` as a path whose file and model card can be written.

    Raises:
      StorageError: its directory is missing or unwritable, or it is a directory.
    """
    path = Path(expand_path(file))
    check_writable(path, "the exported policy")
    check_writable(card_path(path), "the model card")
    return path


def _leaves_spec(tree: Any, batch: Any) -> list[jax.ShapeDtypeStruct]:
    """``tree``'s leaves (one batch row each) with ``batch`` as their leading axis."""
    return [jax.ShapeDtypeStruct((batch, *leaf.shape[1:]), leaf.dtype)
            for leaf in jax.tree.leaves(tree)]


def _policy_function(policy: Policy, batch: Any) -> tuple[Callable[..., Any], list[Any],
                                                          list[str], list[str]]:
    """``(fn, input specs, input names, output names)``: the greedy policy with
    its params as constants, ``fn(obs) -> actions`` or, with memory,
    ``fn(obs, *carry) -> (actions, *carry)`` (the carry's leaves, flat);
    ``batch`` is the specs' leading dimension (symbolic, or a name for jax2onnx)."""
    spec, params, env = policy.spec, policy.params, policy.env
    obs = jax.ShapeDtypeStruct((batch, *env.observation_shape), env.observation_dtype)
    if spec.initial_carry is None:
        return (lambda o: spec.greedy(params, o, jax.random.key(0))), [obs], ["obs"], ["action"]
    carry = jax.eval_shape(functools.partial(spec.initial_carry, 1))  # shapes only
    treedef = jax.tree.structure(carry)
    leaves = _leaves_spec(carry, batch)

    def fn(o, *flat):
        actions, nxt = spec.greedy(params, o, jax.random.key(0), jax.tree.unflatten(treedef, flat))
        return (actions, *jax.tree.leaves(nxt))

    n = len(leaves)
    return (fn, [obs, *leaves], ["obs", *(f"carry_{i}" for i in range(n))],
            ["action", *(f"next_carry_{i}" for i in range(n))])


def _stablehlo(policy: Policy) -> bytes:
    (batch,) = jax.export.symbolic_shape(BATCH)
    fn, specs, _, _ = _policy_function(policy, batch)
    exported = jax.export.export(jax.jit(fn), platforms=_PLATFORMS)(*specs)
    return bytes(exported.serialize())


@contextlib.contextmanager
def _quiet_converter() -> Iterator[None]:
    """jax2onnx 0.13.0 logs a traceback per plugin whose optional library (dm_pix)
    does not import under this JAX, and warns of the JAX names it reads; none of
    them concerns the policy."""
    logger = logging.getLogger("jax2onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, module="jax2onnx")
            yield
    finally:
        logger.setLevel(level)


def _onnx(policy: Policy) -> bytes:
    """The policy traced by JAX (a symbolic batch), then converted: jax2onnx
    replaces ``jnp.shape`` while it traces, which flax's ``scan`` (the
    recurrent cores) cannot take, so it converts the traced program, not the code.
    The converter gets the same symbolic batch the program was traced with: a program
    holding it in an operation's parameters (a CNN's gather's ``slice_sizes``) mixed
    with another ``batch`` of the converter's own is refused by JAX."""
    (batch,) = jax.export.symbolic_shape(BATCH)
    fn, specs, inputs, outputs = _policy_function(policy, batch)
    program = jax.extend.core.jaxpr_as_fun(jax.make_jaxpr(fn)(*specs))
    with _quiet_converter():
        from jax2onnx import to_onnx

        model = to_onnx(program, specs, model_name="jaxtrainer_policy", opset=_ONNX_OPSET,
                        input_names=inputs, output_names=outputs)
    return model.SerializeToString()


def export_policy(policy: Policy, file: str | os.PathLike, format: str = "stablehlo") -> Path:
    """Write ``policy``'s greedy policy to ``file`` in ``format`` and its model
    card to ``<file>.json`` (:func:`_model_card`); returns ``file``'s path.

    Raises:
      ValueError, ImportError: as :func:`check_format`; StorageError: as
        :func:`check_output` (all before anything is traced), or a failed write.
    """
    check_format(format)
    path = check_output(file)
    data = _stablehlo(policy) if format == "stablehlo" else _onnx(policy)
    replace_file(path, data, "the exported policy")
    card = json.dumps(_model_card(policy, format, path), indent=2) + "\n"
    replace_file(card_path(path), card, "the model card")
    return path


def _space(shape: tuple[int, ...], dtype: Any, **extra: Any) -> dict[str, Any]:
    return {"shape": [int(d) for d in shape], "dtype": np.dtype(dtype).name, **extra}


def _action_space(env: Any, dtype: Any) -> dict[str, Any]:
    if env.multi_discrete:
        return _space(env.action_shape, dtype, type="multi_discrete", nvec=list(env.action_nvec))
    if env.discrete:
        return _space(env.action_shape, dtype, type="discrete", n=int(env.num_actions))
    return _space(env.action_shape, dtype, type="box",
                  low=np.asarray(env.action_low, np.float64).tolist(),
                  high=np.asarray(env.action_high, np.float64).tolist())


def _tensor(name: str, spec: Any) -> dict[str, Any]:
    return {"name": name, "shape": [BATCH, *(int(d) for d in spec.shape[1:])],
            "dtype": np.dtype(spec.dtype).name}


def _algorithm(run_dir: Path) -> str | None:
    """The recipe (``config.yaml``) or the module's class (``module.yaml``) of a run."""
    for name, key in ((CONFIG_FILE, "recipe"), (MODULE_FILE, "class_path")):
        file = run_dir / name
        if file.is_file():
            loaded = OmegaConf.load(file)  # load_policy has read it
            if isinstance(loaded, DictConfig) and loaded.get(key):
                return str(loaded.get(key))
    return None


def _reached_return(run_dir: str | os.PathLike, step: int,
                   member: int | None = None) -> dict[str, Any] | None:
    """The last return ``<run_dir>/metrics.csv`` logged at or before ``step``:
    ``{"metric", "value", "step"}`` for the first of :data:`_RETURN_METRICS`
    logged (member ``member``'s own column first); ``None`` without one."""
    file = Path(run_dir) / METRICS_FILE
    if not file.is_file():
        return None
    with open(file, newline="") as f:
        rows = list(csv.DictReader(f))
    own = [f"member/{member}/{m}" for m in _RETURN_METRICS] if member is not None else []
    for metric in (*own, *_RETURN_METRICS):
        found = [(int(float(r["step"])), float(r[metric])) for r in rows
                 if r.get(metric) not in (None, "") and r.get("step") not in (None, "")
                 and int(float(r["step"])) <= step]
        found = [(s, v) for s, v in found if math.isfinite(v)]
        if found:
            at, value = found[-1]
            return {"metric": metric, "value": value, "step": at}
    return None


def _model_card(policy: Policy, format: str, file: str | os.PathLike) -> dict[str, Any]:
    """What the model card of ``policy`` exported to ``file`` says (JSON values)."""
    from importlib import metadata

    env = policy.env
    fn, specs, inputs, outputs = _policy_function(policy, 1)
    results = jax.eval_shape(fn, *specs)
    results = list(results) if isinstance(results, tuple) else [results]
    run_dir = None if policy.checkpoint is None else run_dir_of(policy.checkpoint)
    try:
        version = metadata.version("jaxtrainer")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "file": Path(file).name, "format": format,
        **({"platforms": list(_PLATFORMS)} if format == "stablehlo" else {"opset": _ONNX_OPSET}),
        "policy": "greedy: observation normalisation, the network, then the argmax (discrete) "
                  "or the squash or clip to the action bounds (continuous)",
        "inputs": [_tensor(n, s) for n, s in zip(inputs, specs, strict=True)],
        "outputs": [_tensor(n, s) for n, s in zip(outputs, results, strict=True)],
        "recurrent": policy.spec.initial_carry is not None,
        "env": env.name,
        "observation_space": _space(env.observation_shape, env.observation_dtype),
        "action_space": _action_space(env, results[0].dtype),
        "run_dir": None if run_dir is None else os.path.abspath(run_dir),
        "checkpoint": None if policy.checkpoint is None else os.path.abspath(policy.checkpoint),
        "global_step": policy.global_step, "env_steps": policy.env_steps,
        "algorithm": None if run_dir is None else _algorithm(run_dir),
        "member": policy.member,
        "return": None if run_dir is None else _reached_return(run_dir, policy.global_step,
                                                               policy.member),
        "jaxtrainer_version": version, "jax_version": jax.__version__,
    }
