"""Libraries imported only for later use are imported on first use, and then
behave as the real modules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=240, env={**env, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gymnax_environments_import_without_their_plotting_libraries():
    out = run("""
        import sys
        import jaxtrainer.envs
        env = jaxtrainer.envs.make("CartPole-v1")
        print(sorted(m for m in ("matplotlib", "matplotlib.pyplot", "seaborn", "scipy.stats")
                     if m in sys.modules))
        from gymnax.environments.misc import pong
        palette = pong.sns.color_palette("cubehelix", 3)  # what Pong's render calls
        import seaborn
        print(type(seaborn).__name__, palette == seaborn.color_palette("cubehelix", 3))
        print(pong.colors.ListedColormap.__module__, pong.plt.subplots.__module__)
        import matplotlib.pyplot as plt
        print(type(plt).__name__, sys.modules["matplotlib.pyplot"] is plt, plt.get_backend() != "")
    """).splitlines()
    assert out == ["[]", "module True", "matplotlib.colors matplotlib.pyplot", "module True True"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_algorithms_import_on_first_use():
    out = run("""
        import sys
        import jaxtrainer.algorithms as algorithms
        from jaxtrainer.algorithms import PPO, PPOConfig
        print("evosax" in sys.modules, PPO.__module__, PPOConfig.__module__)
        print(algorithms.NeuroES.__module__, "evosax" in sys.modules)
        print(sorted(algorithms.__all__) == sorted(set(dir(algorithms)) & set(algorithms.__all__)))
        print(len(algorithms.__all__))
        try:
            algorithms.NoSuchAlgorithm
        except AttributeError as e:
            print("AttributeError", "NoSuchAlgorithm" in str(e))
    """).splitlines()
    assert out == ["False jaxtrainer.algorithms.ppo jaxtrainer.algorithms.ppo",
                   "jaxtrainer.algorithms.neuro_es True", "True", "47", "AttributeError True"]


def test_a_module_already_imported_is_not_deferred():
    out = run("""
        import sys
        import json
        from jaxtrainer.runtime._deferred_import import deferred_imports
        with deferred_imports("json", "csv"):
            import csv
            import json as j
        print(type(csv).__name__, j is sys.modules["json"], "csv" in sys.modules)
    """)
    assert out == "module True True"


def test_a_deferred_module_imports_on_first_attribute_and_leaves_sys_modules():
    out = run("""
        import sys
        from jaxtrainer.runtime._deferred_import import deferred_imports
        with deferred_imports("wsgiref", "wsgiref.headers"):
            import wsgiref.headers as headers
            from wsgiref import headers as same
        print(type(headers).__name__, same is headers, "wsgiref" in sys.modules,
              "wsgiref.headers" in sys.modules)
        h = headers.Headers([("Content-Type", "text/plain")])  # first use: the real import
        print(h["content-type"], type(sys.modules["wsgiref.headers"]).__name__,
              headers.Headers is sys.modules["wsgiref.headers"].Headers)
    """).splitlines()
    assert out == ["DeferredModule True False False", "text/plain module True"]


def test_a_missing_module_is_not_deferred_and_fails_where_imported():
    out = run("""
        from jaxtrainer.runtime._deferred_import import deferred_imports
        try:
            with deferred_imports("no_such_module_here"):
                import no_such_module_here  # noqa: F401
        except ModuleNotFoundError as e:
            print("ModuleNotFoundError", e.name)
    """)
    assert out == "ModuleNotFoundError no_such_module_here"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_import_jaxtrainer_and_the_commands_help_do_not_import_jax():
    """`import jaxtrainer` and `jaxtrainer --help` (and `launch --help`) import no JAX:
    each exported name imports its submodule on first use."""
    out = run("""
        import contextlib, io, sys
        import jaxtrainer as jt
        from jaxtrainer.commands import _cli as cli
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["--help"]) == 0
            with contextlib.suppress(SystemExit):
                cli.main(["launch", "--help"])
        print("jax" in sys.modules, jt.__version__)
        print(jt.Trainer.__module__, "jax" in sys.modules, jt.envs.make.__module__)
    """)
    assert out.splitlines() == ["False 0.2.0", "jaxtrainer.trainer.trainer True jaxtrainer.envs.registry"]
