"""``benchmarks/learning_floors.py``: the hybrids' learning floors outside CI, each row
the command a user types, judged against its floor (the runs themselves are not
repeated here: CI keeps one learning case per family)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import learning_floors  # noqa: E402


@pytest.mark.parametrize("finals, status", [({"erl_eda": -169.0, "cemrl_openes": -499.0}, 0),
                                            ({"erl_eda": -169.0, "cemrl_openes": -501.0}, 1)])
def test_each_row_runs_the_users_command_and_fails_below_its_floor(monkeypatch, capsys, finals, status):
    commands = []

    def run(command, label):
        commands.append(command)
        return finals[label], None, "", 1.0

    monkeypatch.setattr(learning_floors, "run_command", run)
    assert learning_floors.main([]) == status
    assert [c[3:6] for c in commands] == [["fit", "erl_eda", "trainer.max_env_steps=20000"],
                                          ["fit", "cemrl_openes", "trainer.max_env_steps=40000"]]
    out = capsys.readouterr().out
    assert "erl_eda: -169.00 >= -500 (1 s)" in out
