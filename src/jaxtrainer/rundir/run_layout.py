"""The names of what a run writes, defined once.

A run directory (``<default_root_dir>/version_N``) holds::

    config.yaml          the recipe's resolved config (runs a recipe started)
    module.yaml          how to rebuild the module (runs started from Python)
    metrics.csv          CSVLogger's rows
    hparams.csv          CSVLogger's hyperparameters (written once per run)
    tensorboard/         TensorBoardLogger's event files (and ProfilerCallback's traces
                         under plugins/profile/<timestamp>/)
    videos/              VideoCallback's step_<N>.gif
    wandb/               WandbLogger's offline files
    checkpoints/         ModelCheckpoint's step directories (checkpoints_1, ... for
                         further ModelCheckpoint callbacks)
    search.csv           a search's trials (searches only)
    front.csv, front.png a multi-objective search's last population and its Pareto front
    sweep_members.csv    a sweep's or search's members and their settings
    sweep_summary.csv    a sweep's final evaluation per member
    slurm_job.json       the ids of the SLURM job (and array task) that last started it
    .lock                the owner's pid, host and start time while a process writes it

orbax writes a checkpoint as ``<step>.orbax-checkpoint-tmp*`` and renames it
when complete. Every module that writes or reads these names takes them from
here; this module imports nothing.
"""

CONFIG_FILE = "config.yaml"
MODULE_FILE = "module.yaml"
METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.csv"
TENSORBOARD_DIR = "tensorboard"
VIDEOS_DIR = "videos"
WANDB_DIR = "wandb"
CHECKPOINTS_DIR = "checkpoints"
SEARCH_FILE = "search.csv"
FRONT_FILE = "front.csv"
BUDGET_ARGUMENTS = ("max_steps", "max_env_steps")
"""The Trainer arguments that state a run's budget: a resume given another
budget records it (``config.yaml``'s ``trainer:`` keys, ``hparams.csv``'s
``trainer/<name>`` rows), so the next plain resume goes on to it."""
FRONT_FIGURE = "front.png"
SWEEP_MEMBERS_FILE = "sweep_members.csv"
SWEEP_SUMMARY_FILE = "sweep_summary.csv"
LOCK_FILE = ".lock"
SLURM_JOB_FILE = "slurm_job.json"
ORBAX_TMP_MARK = ".orbax-checkpoint-tmp"


def checkpoints_dir(index: int) -> str:
    """The folder of the ``index``-th ModelCheckpoint of a Trainer (0: ``checkpoints``)."""
    return CHECKPOINTS_DIR if index == 0 else f"{CHECKPOINTS_DIR}_{index}"


def is_orbax_tmp(name: str) -> bool:
    """Whether ``name`` is one of orbax's unfinished checkpoint entries."""
    return ORBAX_TMP_MARK in name
