"""``make("kinetix/<name>")``: Kinetix's 2D physics tasks, not available with this jax.

Kinetix (PyPI ``kinetix-env``; 3.0.2, the newest, checked) declares
``jax<=0.9.0``, while jaxtrainer needs jax 0.10 (``jax>=0.10.2,<0.11``), so it
cannot be installed next to jaxtrainer without downgrading jax; there is no
``kinetix`` extra. Until a Kinetix release accepts jax 0.10, every
``kinetix/...`` name raises :class:`ImportError` with
:data:`_KINETIX_UNAVAILABLE`, without importing anything.
"""

from __future__ import annotations

from typing import Any, NoReturn

_KINETIX_PREFIX = "kinetix/"

_KINETIX_UNAVAILABLE = ("kinetix/... environments need kinetix-env, whose newest release "
                       "(3.0.2) requires jax<=0.9.0 while jaxtrainer needs jax 0.10 "
                       "(>=0.10.2,<0.11): not installable together, no kinetix extra")
"""The one-line error of every ``kinetix/...`` name."""


def make_kinetix(name: str, **kwargs: Any) -> NoReturn:
    """``kinetix/<name>``: always raises (see the module).

    Raises:
      ImportError: :data:`_KINETIX_UNAVAILABLE`, the jax version conflict.
    """
    raise ImportError(_KINETIX_UNAVAILABLE)
