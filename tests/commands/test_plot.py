"""`jaxtrainer plot`: learning curves from metrics.csv."""

import os
import re
import shutil

import numpy as np
import pytest

from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import _plot as plot
from tests._support import toys


def _fake_run(path, values, extra_row=True):
    os.makedirs(path)
    with open(os.path.join(path, "metrics.csv"), "w") as f:
        f.write("step,env_steps,train/episode_return,eval/x\n")
        for i, v in enumerate(values, 1):
            f.write(f"{i},{i * 100},{v},\n")
        if extra_row:  # an evaluation row without the metric
            f.write(f"{len(values)},{len(values) * 100},,1.0\n")


@pytest.mark.timeout(60)
def test_mean_and_spread_over_runs(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _fake_run(a, [1, 2, 3, 4])
    _fake_run(b, [3, 4, 5])
    out = plot.plot_runs([a, b], str(tmp_path / "c.png"))
    np.testing.assert_array_equal(out["x"], [100, 200, 300])  # up to the shortest run
    np.testing.assert_array_equal(out["mean"], [2, 3, 4])
    np.testing.assert_array_equal(out["low"], [1, 2, 3])
    np.testing.assert_array_equal(out["high"], [3, 4, 5])
    with open(tmp_path / "c.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(60)
def test_the_mean_covers_only_where_every_run_has_points(tmp_path):
    """A run whose points start later (a resumed run's evaluations) is not held
    at its first value backwards: the mean starts where every run has data."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _fake_run(a, [1, 2, 3, 4])
    os.makedirs(b)
    with open(os.path.join(b, "metrics.csv"), "w") as f:
        f.write("step,env_steps,train/episode_return\n3,300,7\n4,400,9\n")
    out = plot.plot_runs([a, b], str(tmp_path / "c.png"))
    np.testing.assert_array_equal(out["x"], [300, 400])
    np.testing.assert_array_equal(out["mean"], [5, 6.5])


@pytest.mark.timeout(60)
def test_a_run_of_one_value_does_not_cut_the_mean_to_its_step(tmp_path, capsys):
    """Two long runs and one stopped at its first log, under one root: the
    mean still spans the long runs, and the one-value run is named as left out
    (it used to shrink the mean and its band to a single point at x=100)."""
    _fake_run(str(tmp_path / "version_0"), [1, 2, 3, 4])
    _fake_run(str(tmp_path / "version_1"), [3, 4, 5, 6])
    _fake_run(str(tmp_path / "version_2"), [50])
    out = plot.plot_runs([str(tmp_path)], str(tmp_path / "c.png"))
    np.testing.assert_array_equal(out["x"], [100, 200, 300, 400])
    np.testing.assert_array_equal(out["mean"], [2, 3, 4, 5])
    assert out["groups"][0]["left_out"] == ["version_2"] and len(out["runs"]) == 3
    assert "mean of 2 run(s)" in out["legend"]
    assert cli.main(["plot", str(tmp_path), "-o", str(tmp_path / "d.png")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        "final mean 5 at env_steps=400 (left out of the mean, one value each: version_2)")


@pytest.mark.timeout(120)
def test_cli_plot_writes_png_from_two_trainer_runs(tmp_path, capsys):
    dirs = []
    for seed in (0, 1):
        t = toys.trainer(tmp_path / "runs", max_steps=8, seed=seed)
        t.fit(toys.EnvCounter())
        dirs.append(t.log_dir)
    out = str(tmp_path / "curves.png")
    assert cli.main(["plot", *dirs, "-o", out, "--metric", "train/episode_return"]) == 0
    assert os.path.getsize(out) > 1000
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["plot", dirs[0], "-o", out, "--metric", "nope"]) == 2
    assert "no column 'nope'; columns: " in capsys.readouterr().err
    assert cli.main(["plot", dirs[0], "-o", out, "--metric", "train/episode_retrun"]) == 2  # a typo
    assert "no column 'train/episode_retrun'; did you mean 'train/episode_return'? columns: " in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit):
        cli.main(["plot"])


@pytest.mark.timeout(120)
def test_cli_plot_a_root_draws_every_run_under_it(tmp_path, capsys):
    """As ``tensorboard --logdir``: a root holds runs at any depth; each is one
    line labelled by its path relative to the root (version_10 after version_2)."""
    root = tmp_path / "runs"
    for seed in (0, 1):  # two tiny real runs: runs/ppo/version_0, version_1
        toys.trainer(root / "ppo", max_steps=8, seed=seed).fit(toys.EnvCounter())
    _fake_run(str(root / "ppo" / "version_10"), [1, 2, 3])
    shutil.copy(root / "ppo" / "version_0" / "module.yaml", root / "ppo" / "version_10")  # same module
    _fake_run(str(root / "sac" / "version_2"), [4, 5, 6])
    _fake_run(str(root / "ppo" / "version_0" / "checkpoints" / "x"), [9, 9, 9])  # not a run
    out = str(tmp_path / "x.png")
    assert cli.main(["plot", str(root / "ppo"), "-o", out]) == 0
    assert os.path.getsize(out) > 1000
    said = capsys.readouterr().out
    assert "over 3 run(s) (version_0, version_1, version_10) of EnvCounter" in said
    drawn = plot.plot_runs([str(root)], out)  # the sac run records no module: drawn apart
    assert drawn["runs"] == ["ppo/version_0", "ppo/version_1", "ppo/version_10", "sac/version_2"]
    assert [(g["label"], g["runs"]) for g in drawn["groups"]] == [
        ("EnvCounter", ["ppo/version_0", "ppo/version_1", "ppo/version_10"]),
        ("runs without config.yaml or module.yaml", ["sac/version_2"])]
    # a run directory and a root together; roots are prefixed by their name
    both = plot.find_runs([str(root / "sac" / "version_2"), str(root / "ppo")])
    assert [label for _, label in both] == ["version_2", "ppo/version_0", "ppo/version_1",
                                            "ppo/version_10"]
    for output in (["-o", out], []):  # without -o it asked for -o instead
        assert cli.main(["plot", str(tmp_path / "empty_nowhere"), *output]) == 2
        assert capsys.readouterr().err == (f"jaxtrainer plot: {tmp_path / 'empty_nowhere'}: no "
                                           "such run directory or root\n")
    (tmp_path / "empty").mkdir()
    assert cli.main(["plot", str(tmp_path / "empty"), "-o", out]) == 2
    assert "no metrics.csv in it or below it" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_many_runs_keep_the_legend_to_the_means(tmp_path):
    """A root of many runs (a seed study) gets a legend entry per group, not per run."""
    few = [str(tmp_path / f"few/s{i}") for i in range(2)]
    for i, d in enumerate(few):
        _fake_run(d, [i, i + 1, i + 2])
    assert plot.plot_runs(few, str(tmp_path / "few.png"))["legend"] == [
        "s0", "s1", "mean of 2 run(s)", "min-max over runs"]
    for i in range(plot.RUNS_IN_LEGEND + 2):
        _fake_run(str(tmp_path / f"many/s{i}"), [i, i + 1, i + 2])
    out = plot.plot_runs([str(tmp_path / "many")], str(tmp_path / "many.png"))
    assert len(out["runs"]) == 8
    assert out["legend"] == ["mean of 8 run(s)", "min-max over runs"]


@pytest.mark.timeout(60)
def test_a_metric_with_one_value_per_run_is_nothing_to_plot_and_the_default_figure_goes_to_the_root(
        tmp_path, capsys, monkeypatch):
    """`plot --metric eval/x --x step` of runs that evaluated once: exit 2, said, no
    file; without -o the figure is the root's curves.png, never the current folder's."""
    root = tmp_path / "runs"
    _fake_run(str(root / "version_0"), [1, 2, 3])   # eval/x logged once, at step 3
    _fake_run(str(root / "version_1"), [2, 3, 4])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs", "--metric", "eval/x", "--x", "step"]) == 2
    err = capsys.readouterr().err
    assert err == ("jaxtrainer plot: nothing to plot: 'eval/x' has one value in each run "
                   "(version_0 at step=3, version_1 at step=3) (a run that evaluated only at "
                   "its end: set trainer.eval_every_n_steps to evaluate during training); "
                   "no figure written\n")
    assert sorted(os.listdir(tmp_path)) == ["runs"] and not (root / "curves.png").exists()
    assert cli.main(["plot", "runs"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {root / 'curves.png'}: ")
    assert (root / "curves.png").is_file() and sorted(os.listdir(tmp_path)) == ["runs"]
    assert cli.main(["plot", "runs/version_0", "runs/version_1"]) == 0  # the folder they share
    assert capsys.readouterr().out.startswith(f"wrote {root / 'curves.png'}: ")


ES_COLUMNS = "step,env_steps,es/best_fitness,fitness/max,fitness/mean,fitness/min,population_size"


def _run_files(path, config, columns, rows, hparams=None):
    """A run directory as a recipe leaves it: ``config.yaml``, ``metrics.csv``
    (``columns`` and ``rows``), and ``hparams.csv`` where given."""
    os.makedirs(path)
    with open(os.path.join(path, "config.yaml"), "w") as f:
        f.write(config)
    with open(os.path.join(path, "metrics.csv"), "w") as f:
        f.write("\n".join([columns, *rows]) + "\n")
    if hparams is not None:
        with open(os.path.join(path, "hparams.csv"), "w") as f:
            f.write("name,value\n" + "".join(f"{k},{v}\n" for k, v in hparams.items()))


@pytest.mark.timeout(60)
def test_plot_of_an_es_run_draws_its_fitness_and_a_pbt_run_its_best(tmp_path, capsys):
    """Issue 68, 3: `jaxtrainer plot runs/openes` (default metric) exited 2, 'no column
    train/episode_return'; each run kind draws its own headline metric."""
    es = tmp_path / "runs" / "openes" / "version_0"
    _run_files(es, "recipe: openes\nenv:\n  name: CartPole-v1\n", ES_COLUMNS,
               ["1,4000,56,56,15.75,8,8", "2,8000,108,108,31,9,8"])
    assert cli.main(["plot", str(tmp_path / "runs" / "openes")]) == 0
    assert capsys.readouterr().out.startswith(
        f"wrote {tmp_path / 'runs' / 'openes' / 'curves.png'}: fitness/mean over 1 run(s) "
        "(version_0) of openes CartPole-v1, final mean 31 at env_steps=8000")
    pbt = tmp_path / "pbt"
    _run_files(pbt, "recipe: pbt_ppo\n", "step,env_steps,train/episode_return,fitness/max,"
               "member/0/fitness", ["1,100,5,9,9", "2,200,6,12,12"])
    assert plot.plot_runs([str(pbt), str(es)], str(tmp_path / "c.png"))["metric"] == \
        "fitness/max / fitness/mean"


@pytest.mark.timeout(60)
def test_runs_of_other_budgets_are_never_one_mean(tmp_path, capsys):
    """Issue 68, 3: runs of 500k and 1M env steps (config.yaml) and of another
    learning rate (hparams.csv) are groups of their own; seeds alone are not."""
    root = tmp_path / "runs"
    rows = ["1,100,1", "2,200,2"]
    for n, (budget, seed) in enumerate([(500000, 0), (1000000, 0), (500000, 1)]):
        _run_files(root / f"version_{n}", f"recipe: ppo\nenv:\n  name: CartPole-v1\ntrainer:\n"
                   f"  max_env_steps: {budget}\n  seed: {seed}\n  default_root_dir: {root}\n",
                   "step,env_steps,train/episode_return", rows)
    for n, lr in ((3, 0.001), (4, 0.003)):
        _run_files(root / f"version_{n}", "recipe: ppo\nenv:\n  name: Acrobot-v1\n",
                   "step,env_steps,train/episode_return", rows,
                   hparams={"trainer/seed": n, "module/learning_rate": lr})
    out = plot.plot_runs([str(root)], str(tmp_path / "c.png"))
    assert [(g["label"], g["runs"]) for g in out["groups"]] == [
        ("ppo CartPole-v1 (trainer.max_env_steps=500000)", ["version_0", "version_2"]),
        ("ppo CartPole-v1 (trainer.max_env_steps=1000000)", ["version_1"]),
        ("ppo Acrobot-v1 (module/learning_rate=0.001)", ["version_3"]),
        ("ppo Acrobot-v1 (module/learning_rate=0.003)", ["version_4"])]


@pytest.mark.timeout(60)
def test_a_figure_is_written_in_its_suffixs_format_and_another_suffix_is_refused_first(
        tmp_path, capsys, monkeypatch):
    """Issue 68, a new user: `jaxtrainer plot ... -o p.txt` wrote a PNG under a .txt
    name. Now a suffix matplotlib writes picks the format (.pdf is a PDF); another is
    one line, status 2, before any run is read (here a folder holding no run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not_a_run").mkdir()
    assert cli.main(["plot", "not_a_run", "-o", "p.txt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxtrainer plot: -o p.txt: a figure is written in the format its file "
                          "name ends in: .eps, ") and ".pdf, " in err and ".png, " in err
    assert err.endswith("; not '.txt' (e.g. -o curves.png)\n")
    assert sorted(os.listdir(tmp_path)) == ["not_a_run"]
    _fake_run(str(tmp_path / "runs" / "version_0"), [1, 2, 3])
    assert cli.main(["plot", "runs", "-o", "p.pdf"]) == 0
    assert (tmp_path / "p.pdf").read_bytes()[:5] == b"%PDF-"
    assert cli.main(["plot", "runs", "-o", "runs"]) == 2
    assert capsys.readouterr().err.endswith(
        "-o runs: it is a directory; expected a file name such as runs/curves.png\n")
    with pytest.raises(ValueError, match=r"-o .*p\.txt: a figure is written"):
        plot.plot_runs([str(tmp_path / "runs")], str(tmp_path / "p.txt"))


@pytest.mark.timeout(60)
def test_runs_apart_only_in_when_they_evaluate_or_log_are_one_mean(tmp_path):
    """Issue 68, a new user: `plot` drew a run of trainer.eval_every_n_steps=100 apart
    from one without: how often a run evaluates, logs or saves, and where it runs,
    change nothing it trains. The budget still does."""
    root = tmp_path / "runs"
    rows = ["1,100,1", "2,200,2"]
    base = "recipe: ppo\nenv:\n  name: CartPole-v1\ntrainer:\n  max_env_steps: 500000\n"
    for n, extra in enumerate(["  eval_every_n_steps: null\n  seed: 0\n",
                               "  eval_every_n_steps: 100\n  seed: 1\n  log_every_n_steps: 5\n"
                               "  devices: 2\ncallbacks:\n  checkpoint:\n    every_n_steps: 50\n"
                               "algorithm:\n  eval_episodes: 8\n"]):
        _run_files(root / f"version_{n}", base + extra, "step,env_steps,train/episode_return", rows)
    for n, (every, budget) in enumerate([(None, 100), (100, 100), (None, 200)], start=2):
        _run_files(root / f"version_{n}", "recipe: ppo\nenv:\n  name: Acrobot-v1\n",
                   "step,env_steps,train/episode_return", rows,
                   hparams={"trainer/seed": n, "trainer/eval_every_n_steps": every,
                            "trainer/log_every_n_steps": n, "trainer/num_devices": n,
                            "module/eval_episodes": n, "trainer/max_steps": budget})
    out = plot.plot_runs([str(root)], str(tmp_path / "c.png"))
    assert [(g["label"], g["runs"]) for g in out["groups"]] == [
        ("ppo CartPole-v1", ["version_0", "version_1"]),
        ("ppo Acrobot-v1 (trainer/max_steps=100)", ["version_2", "version_3"]),
        ("ppo Acrobot-v1 (trainer/max_steps=200)", ["version_4"])]


@pytest.mark.timeout(60)
def test_a_run_without_an_episode_return_draws_its_loss_against_steps(tmp_path, capsys):
    """Issue 68, a new user: the plot of a run of a module that is not RL (the
    Writing-a-module guide's Regression: `loss`, env_steps 0 throughout) exited 2 for
    want of train/episode_return; it draws its loss against the step. A run that logs
    no return, fitness or loss is one line naming its columns."""
    run = tmp_path / "runs" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("step,loss,env_steps,steps_per_second\n20,1.9,0,6908.4\n"
                                     "40,1.2,0,30690.5\n60,0.5,0,30000.0\n")
    (run / "module.yaml").write_text("class_path: __main__.Regression\ninit_args: {}\n")
    assert cli.main(["plot", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out == (f"wrote {tmp_path / 'runs' / 'curves.png'}: loss over 1 "
                                       "run(s) (version_0) of Regression, final mean 0.5 at "
                                       "step=60\n")
    (run / "metrics.csv").write_text("step,env_steps,grad_norm\n1,0,3.0\n2,0,2.0\n")
    assert cli.main(["plot", str(run), "-o", str(tmp_path / "c.png")]) == 2
    assert capsys.readouterr().err == (
        f"jaxtrainer plot: {run / 'metrics.csv'} has no episode return, fitness or loss column "
        "to draw by default; columns: step, env_steps, grad_norm; name one with --metric\n")


def _jaxtrainer(capsys, *args):
    """``jaxtrainer ARGS`` as a user types it, through the command's ``main`` in this
    process (what ``python -m jaxtrainer`` calls); its stdout."""
    capsys.readouterr()
    status = cli.main(list(args))
    said = capsys.readouterr()
    assert status == 0, said.err[-3000:]
    return said.out


@pytest.mark.timeout(300)
def test_plot_after_fit_ppo_draws_the_return_fit_printed(tmp_path, capsys):
    """Issue 68: `jaxtrainer fit ppo` ended `eval/episode_return=500.00 run_dir=...`
    and `jaxtrainer plot RUN` drew train/episode_return alone. Now the plot says the
    value fit printed: a run evaluated at its end only draws its training return
    with that evaluation as a star, named in plot's line; a run evaluated during
    training draws the same metric with its last evaluation as the star (one metric
    for every RL run of a figure), and `--metric eval/episode_return` its
    evaluations, the last the value fit printed."""
    small = ["trainer.max_env_steps=8192", "trainer.log_every_n_steps=4",
             "trainer.enable_progress_bar=false", f"trainer.default_root_dir={tmp_path / 'ppo'}"]
    last = _jaxtrainer(capsys, "fit", "ppo", *small).strip().splitlines()[-1]
    printed, run = re.fullmatch(r"eval/episode_return=(\S+) run_dir=(\S+)", last).groups()
    said = _jaxtrainer(capsys, "plot", run)
    assert said.startswith(f"wrote {os.path.join(run, 'curves.png')}: train/episode_return "
                           "over 1 run(s) (version_0) of ppo CartPole-v1, final mean ")
    assert said.strip().endswith(f"at env_steps=8192; eval/episode_return at the end {printed}")
    drawn = plot.plot_runs([run], str(tmp_path / "a.png"))
    assert drawn["legend"][-1] == f"eval/episode_return at the end ({printed})"
    assert drawn["groups"][0]["final"] == [("version_0", 8192.0, pytest.approx(float(printed), abs=5e-3))]

    last = (
        _jaxtrainer(capsys, "fit", "ppo", *small, "trainer.eval_every_n_steps=4")
        .strip()
        .splitlines()[-1]
    )
    printed, run = re.fullmatch(r"eval/episode_return=(\S+) run_dir=(\S+)", last).groups()
    said = _jaxtrainer(capsys, "plot", run)
    assert said.startswith(f"wrote {os.path.join(run, 'curves.png')}: train/episode_return "
                           "over 1 run(s) (version_1) of ppo CartPole-v1, final mean ")
    assert said.strip().endswith(f"at env_steps=8192; eval/episode_return at the end {printed}")
    drawn = plot.plot_runs([run], str(tmp_path / "b.png"), "eval/episode_return")
    assert drawn["metric"] == "eval/episode_return" and len(drawn["x"]) == 4
    assert f"{drawn['mean'][-1]:.2f}" == printed and drawn["groups"][0]["final"] == []


@pytest.mark.timeout(400)
def test_plot_of_a_root_draws_one_metric_for_every_rl_run_and_nothing_past_the_canvas(
        tmp_path, monkeypatch, capsys):
    """Issue 68, a new user (m8): `jaxtrainer plot runs/ppo -o curves.png` over a
    CartPole run, an Acrobot run and a run resumed with a raised budget (its only
    evaluations the two final ones) drew train/episode_return for two and a 2-point
    eval/episode_return line for the third; the legend ran past the right edge and the
    y label was cut. Every RL run draws train/episode_return, its last evaluation (what
    fit printed) a star; the figure's artists lie inside its canvas."""
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    printed = []
    for args in (["trainer.max_env_steps=4096"], ["env.name=Acrobot-v1", "trainer.max_env_steps=4096"],
                 ["algorithm.lr=0.001", "trainer.max_env_steps=4096"],
                 ["trainer.ckpt_path=last", "trainer.max_env_steps=8192"]):
        assert cli.main(["fit", "ppo", *args]) == 0
        printed.append(re.search(r"^eval/episode_return=(\S+) run_dir=",
                                 capsys.readouterr().out, re.M).group(1))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert cli.main(["plot", "runs/ppo", "-o", "curves.png"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("wrote curves.png: train/episode_return of 3 groups, each its own ")
    assert [line.split(":", 1)[0].strip() for line in lines[1:]] == [
        "ppo CartPole-v1 (module/lr=0.00025, module/total_updates=8, trainer/max_env_steps=4096)",
        "ppo Acrobot-v1",
        "ppo CartPole-v1 (module/lr=0.001, module/total_updates=16, trainer/max_env_steps=8192)"]
    assert [line.rsplit("; ", 1)[1] for line in lines[1:]] == [
        f"eval/episode_return at the end {v}" for v in (printed[0], printed[1], printed[3])]
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    (fig,) = figures
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches, every artist drawn
    assert 0 <= box.x0 and 0 <= box.y0, box
    assert box.x1 <= fig.get_figwidth() and box.y1 <= fig.get_figheight(), (box, fig.get_size_inches())
    monkeypatch.undo()
    plt.close(fig)


@pytest.mark.timeout(300)
def test_a_run_dir_of_the_glob_without_metrics_is_skipped_with_a_note(tmp_path, monkeypatch,
                                                                      capsys):
    """Issue 68, a new user (pl2): `jaxtrainer plot runs/ppo/version_* -o eval.png --metric
    eval/episode_return --x step` exited 2 for one run directory of the glob holding no
    metrics.csv (a double Ctrl-C during compile leaves only config.yaml), where plotting
    the root skips it. It is skipped with one line on stderr naming it; a glob of such
    directories alone is still the error."""
    import glob

    monkeypatch.chdir(tmp_path)
    assert cli.main(["fit", "ppo", "trainer.max_env_steps=4096", "trainer.eval_every_n_steps=4"]) == 0
    stopped = tmp_path / "runs" / "ppo" / "version_1"
    stopped.mkdir()
    shutil.copy(tmp_path / "runs" / "ppo" / "version_0" / "config.yaml", stopped)
    capsys.readouterr()
    paths = sorted(glob.glob("runs/ppo/version_*"))  # as the shell expands it
    assert paths == ["runs/ppo/version_0", "runs/ppo/version_1"]
    assert cli.main(["plot", *paths, "-o", "eval.png", "--metric", "eval/episode_return",
                     "--x", "step"]) == 0
    said = capsys.readouterr()
    assert said.err == ("jaxtrainer plot: skipped runs/ppo/version_1: no metrics.csv in it or "
                        "below it (a run stopped before its first log)\n")
    assert said.out.startswith("wrote eval.png: eval/episode_return over 1 run(s) (version_0) of "
                               "ppo CartPole-v1, final mean ")
    assert said.out.endswith(" at step=8\n") and (tmp_path / "eval.png").is_file()
    assert cli.main(["plot", "runs/ppo", "-o", "root.png", "--metric", "eval/episode_return",
                     "--x", "step"]) == 0  # the root: the same run, nothing to note
    assert capsys.readouterr().err == ""
    assert cli.main(["plot", "runs/ppo/version_1", "-o", "none.png"]) == 2
    assert capsys.readouterr().err == (
        "jaxtrainer plot: runs/ppo/version_1: no metrics.csv in it or below it (is it a run "
        "directory or a root of runs?)\n")
    assert not (tmp_path / "none.png").exists()
