"""A step directory without ``meta/`` (a save cut off, or a damaged directory) is
never taken silently: ``last`` names it when it passes over it, and a run whose
only step is such a directory says so."""

import shutil

import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from tests._support import toys


@pytest.mark.timeout(120)
def test_last_names_a_newer_step_without_meta_and_a_run_with_only_such_steps(run_dir, capsys):
    t = toys.trainer(run_dir, max_steps=4, log_every_n_steps=2,
                     callbacks=[jt.ModelCheckpoint(every_n_steps=2)])
    t.fit(toys.EnvCounter())
    run = run_dir / "version_0"
    shutil.rmtree(run / "checkpoints" / "4" / "meta")
    capsys.readouterr()
    assert ckpt.resolve(run) == run / "checkpoints" / "2"
    err = capsys.readouterr().err
    assert err == (f"jaxtrainer: passing over {run / 'checkpoints' / '4'}: incomplete (no meta/: "
                   f"its save did not finish, or the directory is damaged); using "
                   f"{run / 'checkpoints' / '2'}\n")
    shutil.rmtree(run / "checkpoints" / "2" / "meta")
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint in .*version_0: .*/2, "
                                                r".*/4 have no meta/ \(a save that did not "
                                                r"finish, or a damaged directory\)"):
        ckpt.resolve(run)
