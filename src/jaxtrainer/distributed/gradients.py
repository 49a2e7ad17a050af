"""EvoRL's ``evorl.distributed.gradients`` at jaxtrainer's path:
``loss_and_pgrad``, ``gradient_update`` (both forms) and
``agent_gradient_update``, from :mod:`jaxtrainer.compat.evorl.gradients`.

jaxtrainer's own one-call ``gradient_update`` and ``local_copy`` are in
:mod:`jaxtrainer.distributed.gradient_step` (``local_copy`` is importable from
here as well)."""

from jaxtrainer.distributed.forwarding import forward

EVORL_NAMES = (
    "agent_gradient_update", "gradient_update", "local_copy", "loss_and_pgrad")
"""The names at this path (EvoRL's; ``local_copy`` is jaxtrainer's own)."""
__all__ = list(EVORL_NAMES)

__getattr__, __dir__ = forward(
    "jaxtrainer.compat.evorl.gradients", [n for n in __all__ if n not in globals()], __name__)
