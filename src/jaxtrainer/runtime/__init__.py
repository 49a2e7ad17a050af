"""The process around a fit: a floor below the Trainer and its checkpoints.

* :mod:`~jaxtrainer.runtime._startup`: a command's first line (Ctrl-C while it
  starts, before the heavy imports);
* :mod:`~jaxtrainer.runtime._signals`: preemption and stop signals, phase lines,
  ending a process at once;
* :mod:`~jaxtrainer.runtime._slurm`: SLURM's time-limit warning, requeued jobs;
* :mod:`~jaxtrainer.runtime._lost_process`: a run whose other process died;
* :mod:`~jaxtrainer.runtime.compilation_cache`: JAX's persistent compilation cache;
* :mod:`~jaxtrainer.runtime._determinism`: ``Trainer(deterministic=True)``, XLA's side.

Nothing is imported here (``startup`` must stay free of JAX); import the
modules by name.
"""
