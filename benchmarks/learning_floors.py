"""Recipes that learn at a fraction of their budget, checked outside CI.

CI keeps one small learning case per algorithm family (``tests/recipes/
test_hybrid_recipes_learn.py``: ERL-ES for the evolution + RL hybrids, PBT-CSO for
the populations); the other hybrids' floors are checked here, each a fresh process
of what a user types::

    jaxtrainer fit <recipe> <budget> trainer.seed=0

    python benchmarks/learning_floors.py            # every row
    python benchmarks/learning_floors.py erl_eda    # one

Pendulum-v1: a random actor scores about -1,200 and the full runs -150 to -190
(``docs/benchmarks.md``). Prints each row's final greedy return against its floor
and the wall seconds; exits 1 when a row is below its floor.
"""

from __future__ import annotations

import sys
import tempfile

from _recipe_seeds import run_command

ROWS = {
    # recipe: (overrides, floor); ERL-EDA at a tenth of its budget, CEMRL-OpenES at a fifth
    "erl_eda": (("trainer.max_env_steps=20000", "trainer.devices=1"), -500.0),  # -169 at 20k, seed 0
    "cemrl_openes": (("trainer.max_env_steps=40000", "trainer.devices=1"), -500.0),
}


def main(names: list[str]) -> int:
    failed = 0
    for name in names or list(ROWS):
        overrides, floor = ROWS[name]
        with tempfile.TemporaryDirectory() as root:
            command = [sys.executable, "-m", "jaxtrainer", "fit", name, *overrides, "trainer.seed=0",
                       f"trainer.default_root_dir={root}", "trainer.enable_progress_bar=false",
                       "trainer.enable_checkpointing=false", "trainer.logger=false"]
            final, _, _, seconds = run_command(command, name)
        ok = final >= floor
        failed += not ok
        print(f"{name}: {final:.2f} {'>=' if ok else '<'} {floor:g} ({seconds:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
