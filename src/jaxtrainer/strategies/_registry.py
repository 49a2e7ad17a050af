"""Strategy names: ``Trainer(strategy="pmap")``.

Strategies register themselves with :func:`register`; ``"auto"`` picks one from
the visible devices.
"""

from __future__ import annotations

import jax

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._process import cluster_detected
from jaxtrainer.strategies.base import DevicesArg, Strategy

_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make ``cls`` available as ``Trainer(strategy=cls.name)``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string to be registered")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    """Registered strategy names, plus ``"auto"``."""
    return sorted(_REGISTRY) + ["auto"]


def auto_name(devices: DevicesArg = "auto") -> str:
    """``"multi_node"`` when a multi-process cluster is detected
    (:func:`cluster_detected`, checked before anything starts JAX's backend) or
    the distributed runtime is already initialised; otherwise ``"single"`` on
    one local device and ``"pmap"`` when several are used."""
    if "multi_node" in _REGISTRY and (cluster_detected() or jax.process_count() > 1):
        return "multi_node"
    devices = arguments.devices(devices)
    if isinstance(devices, int):
        n = devices
    elif isinstance(devices, str):
        n = jax.local_device_count()
    else:
        n = len(devices)
    return "pmap" if n > 1 else "single"


def resolve(strategy: str | Strategy, devices: DevicesArg = "auto", *, jit: bool = True) -> Strategy:
    """A Strategy instance from a name or an instance.

    Raises:
      ValueError: unknown name (the message lists the registered ones), or a
        malformed ``devices`` (the message lists the accepted forms).
      TypeError: neither a name nor a :class:`Strategy`.
    """
    devices = arguments.devices(devices)  # a malformed value fails here, before any JAX use
    if isinstance(strategy, Strategy):
        strategy.jit = strategy.jit and jit
        return strategy
    if not isinstance(strategy, str):
        raise TypeError(
            f"strategy={strategy!r}: expected a name ({', '.join(available())}) or a Strategy"
        )
    name = auto_name(devices) if strategy == "auto" else strategy
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown strategy {strategy!r}{arguments.did_you_mean(strategy, available()) or ';'} "
            f"choose one of: {', '.join(available())}")
    return _REGISTRY[name](devices, jit=jit)
