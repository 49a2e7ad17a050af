"""The run directory: a floor below the Trainer, its checkpoints and callbacks.

* :mod:`~jaxtrainer.rundir.run_layout`: every file and folder name a run writes;
* :mod:`~jaxtrainer.rundir.runs`: run directories (``version_<n>``);
* :mod:`~jaxtrainer.rundir._run_kind`: what kind of run a directory holds;
* :mod:`~jaxtrainer.rundir.module_record`: ``module.yaml``, what rebuilds a module
  started from Python;
* :mod:`~jaxtrainer.rundir.storage`: storage errors (a full disk, a read-only
  directory) named in one line;
* :mod:`~jaxtrainer.rundir._run_lock`: one process owns a run directory.

A saved run restored into the module that wrote it is :mod:`jaxtrainer.inference`'s
(it builds the Trainer that restores it).

The resolver of ``"last"``, ``"best"`` and a step is still
:mod:`jaxtrainer.checkpoint.resolve`: it reads the checkpoints' metadata
(:mod:`jaxtrainer.checkpoint._files`), and the checkpoint package's face exports it.

The package is ``rundir``, not ``runs``: ``jaxtrainer.runs`` is 0.1's module
path, which imports (with a warning) until 0.3.0. Nothing is imported here;
import the modules by name.
"""
