"""Optuna's TPE choosing a search's trials, 4 rounds of 8, stopped by SIGTERM and resumed.

Runs the PPO recipe (CartPole, the recipe's budget of 500k env steps per
member slot: 4 rounds of 244 updates) as a user types it::

    python recipes/ppo.py search.method=optuna search.members=8 search.rounds=4 \\
        'search.space.lr=loguniform(1e-5,1e-2)' 'search.space.ent_coef=uniform(0,0.05)'

sends it SIGTERM once the study holds the second round's trials (it saves a
checkpoint and stops), then runs the same command plus
``trainer.ckpt_path=last``. Both with ``JAX_LOG_COMPILES=1``. Prints, from each
process's log and from the study in ``<run>/study.db``: the programs compiled
(``jit(body)``: 3 when nothing recompiles: initial state, training,
evaluation), the study's trials before and after the resume (asked ids are
unique: no trial asked twice, and no hyperparameters drawn twice; none left running), the best trial's value
(what the study was told: the trial's greedy evaluation when its round ended)
and the recipe's final greedy evaluation of the member with the best fitness.

    python benchmarks/search_optuna.py            # about 2 minutes on 2 cores
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "ppo.py"
COMMAND = ["search.method=optuna", "search.members=8", "search.rounds=4",
           "search.space.lr=loguniform(1e-5,1e-2)", "search.space.ent_coef=uniform(0,0.05)"]
LAST_LINE = re.compile(r"eval/episode_return=(\S+).* run_dir=(\S+)")


def study_trials(run_dir: Path) -> list:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="search", storage=f"sqlite:///{run_dir / 'study.db'}")
    return study.get_trials(deepcopy=False)


def start(root: str, extra: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    return subprocess.Popen([sys.executable, str(RECIPE), *COMMAND, *extra,
                             f"trainer.default_root_dir={root}"],
                            stdout=open(log.with_suffix(".out"), "w"),
                            stderr=open(log.with_suffix(".err"), "w"), env=env)


def compiles(log: Path) -> int:
    return sum("Compiling jit(body)" in line for line in open(log.with_suffix(".err")))


def describe(trials: list) -> str:
    states = Counter(t.state.name for t in trials)
    ids = [t.user_attrs["search_trial"] for t in trials]
    drawn = {tuple(sorted(t.params.items())) for t in trials}
    return (f"{len(trials)} trials ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))}), "
            f"asked ids unique: {len(set(ids)) == len(ids)}, hyperparameters unique: "
            f"{len(drawn) == len(trials)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        run_dir = Path(root) / "version_0"
        first = start(root, [], Path(root) / "first")
        while not (run_dir / "study.db").exists() or len(study_trials(run_dir)) < 16:
            if first.poll() is not None:
                raise SystemExit(f"the search ended before its second round: {first.returncode}")
            time.sleep(0.5)
        first.send_signal(signal.SIGTERM)
        code = first.wait(timeout=300)
        before = study_trials(run_dir)
        print(f"first run: exit {code} after SIGTERM, {compiles(Path(root) / 'first')} programs "
              f"compiled; study: {describe(before)}", flush=True)
        second = start(root, ["trainer.ckpt_path=last"], Path(root) / "second")
        second.wait(timeout=900)
        after = study_trials(run_dir)
        done = [t for t in after if t.value is not None]
        best = max(done, key=lambda t: t.value)
        last = LAST_LINE.search(open(Path(root) / "second.out").read())
        print(f"resumed run: exit {second.returncode}, {compiles(Path(root) / 'second')} programs "
              f"compiled; study: {describe(after)}", flush=True)
        print(f"best trial: #{best.number} (search trial {best.user_attrs['search_trial']}) "
              f"value {best.value:.2f}, lr {best.params['lr']:.4g}, ent_coef "
              f"{best.params['ent_coef']:.4g}; final greedy evaluation of the best member: "
              f"{last.group(1) if last else '?'}; study.db in the run directory: "
              f"{(run_dir / 'study.db').exists()}")


if __name__ == "__main__":
    main()
