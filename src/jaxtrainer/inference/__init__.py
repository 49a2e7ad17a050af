"""A trained run used: :mod:`~jaxtrainer.inference.saved_run` restores a saved
run into the module that wrote it (``jaxtrainer eval``) and loads its policy
(:func:`jaxtrainer.load_policy`). It builds the Trainer that restores a run, so it
sits above the Trainer and the populations. Nothing is imported here; import the
module by name.
"""
