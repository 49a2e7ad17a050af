"""The command line: ``jaxtrainer`` and its subcommands, one module each.

* :mod:`~jaxtrainer.commands._cli`: the ``jaxtrainer`` entry point, which imports
  a subcommand only when it runs;
* :mod:`~jaxtrainer.commands.fit`: ``jaxtrainer fit <recipe>`` (and
  :mod:`~jaxtrainer.commands.script`, the ``__main__`` of ``recipes/<name>.py``);
* :mod:`~jaxtrainer.commands._eval_cli` and :mod:`~jaxtrainer.commands._eval_run`:
  ``jaxtrainer eval`` (arguments without JAX, then the evaluation), with
  :mod:`~jaxtrainer.commands._render` for its videos;
* :mod:`~jaxtrainer.commands._export_cli`: ``jaxtrainer export`` (a saved run's
  policy as a StableHLO or ONNX file, :mod:`jaxtrainer.inference.export`);
* :mod:`~jaxtrainer.commands._plot` and :mod:`~jaxtrainer.commands._search_plot`:
  ``jaxtrainer plot``;
* :mod:`~jaxtrainer.commands._launch`: ``jaxtrainer launch`` (N processes of one
  multi-node run on this machine);
* :mod:`~jaxtrainer.commands._envs_cli`: ``jaxtrainer envs``.

Nothing is imported here: ``jaxtrainer --help`` loads only the entry point.
"""
