"""A small PopulationTrainer run shared by the population modules' tests."""

from __future__ import annotations

from jaxtrainer import PopulationTrainer
from tests._support.modules import GenerationLog

QUIET = dict(compile_evaluation_ahead=False, logger=False, enable_checkpointing=False,
             enable_progress_bar=False)
"""No logger, checkpoints, progress bar or ahead-of-time evaluation compile."""


def evolve(module, devices, generations, strategy="pmap", log_every=4, callbacks=(), members=10,
           ckpt_path=None, **kw):
    """Fit ``module`` with ``members`` members for ``generations`` generations on ``devices``
    devices (``QUIET`` unless ``kw`` says otherwise), from ``ckpt_path`` if given:
    ``(trainer, metrics of every logged generation)``."""
    log = GenerationLog()
    trainer = PopulationTrainer(members, strategy=strategy, devices=devices,
                                max_generations=generations, log_every_n_generations=log_every,
                                callbacks=[log, *callbacks], **{**QUIET, **kw})
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, log.metrics
