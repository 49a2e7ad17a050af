"""EvoRL's ``evorl.distributed.gradients`` at jaxtrainer's path:
``loss_and_pgrad``, ``gradient_update`` (both forms) and
``agent_gradient_update``, from :mod:`jaxtrainer.compat.evorl.gradients`.

jaxtrainer's own one-call ``gradient_update`` and ``local_copy`` are in
:mod:`jaxtrainer.distributed.gradient_step` (``local_copy`` is importable from
here as well)."""

from jaxtrainer.compat.evorl.gradients import agent_gradient_update, gradient_update, loss_and_pgrad
from jaxtrainer.distributed.gradient_step import local_copy

__all__ = ["agent_gradient_update", "gradient_update", "local_copy", "loss_and_pgrad"]
