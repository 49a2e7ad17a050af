"""PureJaxRL's scripts ported to jaxtrainer against the scripts themselves.

    python benchmarks/purejaxrl_ports.py PATH_TO_PUREJAXRL [--python PYTHON]
        [--total-timesteps 2e5] [--seeds 0,1,2] [--only ppo,ppo_rnn,dqn]

For each of ``examples/purejaxrl/{ppo,ppo_rnn,dqn}.py`` (each a ``global_view``
module, PureJaxRL's own CartPole-v1 settings), CartPole-v1, ``--total-timesteps``
env steps, every seed: ours under ``Trainer(strategy="single")`` and under
``Trainer(strategy="pmap")`` on 2 fake CPU devices, and the original script from
the PureJaxRL checkout at ``PATH_TO_PUREJAXRL`` (``purejaxrl/<script>.py``,
imported unmodified; ``benchmarks/_purejaxrl_original.py`` sets only its config
dict's budget and seeds) at the same budget and seeds. One line per script and
strategy:

    <script> <strategy> ours=<mean over seeds> original=<mean> original_min=<lowest seed>

with a return per run: the mean return over the last tenth of the run's updates
logged by ours every tenth of the run). PPO scripts: the mean of the episodes
completed there (ours ``train/episode_return``, the originals' from their
``traj_batch.info``). DQN: the script's own ``returns``, the last completed
episode's return per env averaged over the envs, then over those updates (ours
``train/returned_episode_returns``, the same quantity). The check is ``ours >= original_min`` on every
line; the script exits 1 when one fails.

The originals need the packages they were written for: ``ppo.py`` unpacks
gymnax's 5-tuple ``step`` (gymnax < 0.0.9), ``ppo_rnn.py`` calls flax's
pre-0.7 ``GRUCell`` API, ``dqn.py`` calls ``jax.tree_map`` (gone since JAX 0.6),
and their ``wrappers.py`` imports brax and navix. ``--python`` names the
interpreter of a virtual environment holding them (default: this one), and
``--python-dqn`` one for ``dqn.py`` (default: ``--python``). Measured with:

    python -m venv /tmp/pjr_venv2 && /tmp/pjr_venv2/bin/pip install "jax==0.4.13" \
        "jaxlib==0.4.13" "flax==0.6.11" "numpy<1.26" "scipy<1.12" "ml_dtypes<0.3" optax \
        chex distrax "tensorflow-probability<0.22" "gymnax<0.0.7" "brax<0.9.2" "navix<0.4"
    python -m venv /tmp/pjr_venv && /tmp/pjr_venv/bin/pip install "jax[cpu]==0.4.38" \
        "flax==0.10.2" "optax==0.2.4" "chex==0.1.88" "gymnax==0.0.8" "flashbax==0.1.2" \
        "distrax==0.1.5" wandb
    python benchmarks/purejaxrl_ports.py PATH --python /tmp/pjr_venv2/bin/python \
        --python-dqn /tmp/pjr_venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = ("ppo", "ppo_rnn", "dqn")


def ours(script: str, strategy: str, total: float, seed: int) -> float:
    """Our port's mean return over the last tenth of its updates."""
    import importlib

    import jaxtrainer as jt

    sys.path.insert(0, str(ROOT / "examples" / "purejaxrl"))
    mod = importlib.import_module(script)
    cls = {"ppo": "PPO", "ppo_rnn": "PPORNN", "dqn": "DQN"}[script]
    module = getattr(mod, cls)({**mod.CONFIG, "TOTAL_TIMESTEPS": total})
    updates = int(total) // module.env_steps_per_step
    seen: list[float] = []
    # the original's own measure: DQN logs the LogWrapper's returns, PPO its episodes
    name = "train/returned_episode_returns" if script == "dqn" else "train/episode_return"

    class Last(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            if name in metrics:
                seen.append(metrics[name])

    trainer = jt.Trainer(strategy=strategy, max_steps=updates,
                         log_every_n_steps=max(1, updates // 10), seed=seed,
                         enable_checkpointing=False, enable_progress_bar=False,
                         default_root_dir=str(pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
                                              / "purejaxrl_ports_runs"),
                         callbacks=[Last()], compilation_cache=True)
    trainer.fit(module)
    return seen[-1]


def original(path: str, python: str, script: str, total: float, seeds: list[int]) -> list[float]:
    out = subprocess.run([python, str(HERE / "_purejaxrl_original.py"), path, script, str(total),
                          *map(str, seeds)], capture_output=True, text=True, timeout=3600,
                         env={**os.environ, "XLA_FLAGS": ""})
    if out.returncode:
        raise RuntimeError(f"original {script} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["returns"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a PureJaxRL checkout (holding purejaxrl/ppo.py)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--python-dqn", default=None)
    parser.add_argument("--total-timesteps", type=float, default=2e5)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--only", default=",".join(SCRIPTS))
    args = parser.parse_args()
    if not (pathlib.Path(args.path) / "purejaxrl" / "ppo.py").is_file():
        parser.error(f"{args.path}: expected a PureJaxRL checkout holding purejaxrl/ppo.py")
    seeds = [int(s) for s in args.seeds.split(",")]
    failed = False
    for script in args.only.split(","):
        python = (args.python_dqn or args.python) if script == "dqn" else args.python
        orig = original(args.path, python, script, args.total_timesteps, seeds)
        print(f"# {script} original per seed: {orig}", flush=True)
        for strategy in ("single", "pmap"):
            mine = [ours(script, strategy, args.total_timesteps, s) for s in seeds]
            mean, omean, omin = sum(mine) / len(mine), sum(orig) / len(orig), min(orig)
            print(f"# {script} {strategy} ours per seed: {mine}", flush=True)
            print(f"{script} {strategy} ours={mean:.1f} original={omean:.1f} original_min={omin:.1f}"
                  + ("" if mean >= omin else "  FAILED"), flush=True)
            failed |= mean < omin
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
