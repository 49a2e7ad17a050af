"""The command line: ``jaxtrainer`` and its subcommands, one module each.

* :mod:`~jaxtrainer.commands.cli`: the ``jaxtrainer`` entry point, which imports
  a subcommand only when it runs;
* :mod:`~jaxtrainer.commands.fit`: ``jaxtrainer fit <recipe>`` (and
  :mod:`~jaxtrainer.commands.script`, the ``__main__`` of ``recipes/<name>.py``);
* :mod:`~jaxtrainer.commands.eval_cli` and :mod:`~jaxtrainer.commands.eval_run`:
  ``jaxtrainer eval`` (arguments without JAX, then the evaluation), with
  :mod:`~jaxtrainer.commands.render` for its videos;
* :mod:`~jaxtrainer.commands.export_cli`: ``jaxtrainer export`` (a saved run's
  policy as a StableHLO or ONNX file, :mod:`jaxtrainer.inference.export`);
* :mod:`~jaxtrainer.commands.plot` and :mod:`~jaxtrainer.commands.search_plot`:
  ``jaxtrainer plot``;
* :mod:`~jaxtrainer.commands.launch`: ``jaxtrainer launch`` (N processes of one
  multi-node run on this machine);
* :mod:`~jaxtrainer.commands.envs_cli`: ``jaxtrainer envs``.

Nothing is imported here: ``jaxtrainer --help`` loads only the entry point.
"""
