"""Loggers: values as Python numbers, hyperparameters once, files read
back with each backend's own reader, closed on every exit path."""

import csv
import glob
import json
import os
import re
import struct
import time
import types

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.loggers import to_number
from tests._support import toys


def test_to_number_converts_scalars_and_rejects_other_shapes_loudly():
    assert to_number("a", jnp.float32(1.5)) == 1.5 and type(to_number("a", jnp.float32(1.5))) is float
    assert to_number("b", jnp.array([2.5], jnp.bfloat16)) == 2.5
    assert type(to_number("c", np.int64(3))) is int and to_number("d", True) == 1
    assert type(to_number("e", jnp.array(7, jnp.int32))) is int
    with pytest.raises(TypeError, match=r"metric 'v' has shape \(3,\)"):
        to_number("v", jnp.zeros(3))
    with pytest.raises(TypeError, match="metric 's' is a str"):
        to_number("s", "1.0")


class DeviceValues(jt.Callback):
    """Puts a jax scalar, a bf16 1-element array and a numpy int into the metrics."""

    order = -10

    def on_train_steps_end(self, trainer, module, metrics):
        metrics["dev/f32"] = jnp.float32(trainer.global_step) * 0.5
        metrics["dev/bf16"] = jnp.array([trainer.global_step], jnp.bfloat16)
        metrics["dev/int"] = np.int64(trainer.global_step)


def test_tensorboard_event_files_read_back_with_tensorboards_reader(run_dir):
    """Also: an evaluation every 3 steps cuts no log interval of 2 steps. The
    training rows stay at 2, 4, 6, each the mean over its 2 steps (the metric
    ``step_number`` is the step's number), and the evaluation rows come at 3
    and 6, in the CSV file and TensorBoard alike (4 devices; 1 in
    test_an_evaluation_cuts_no_log_interval_on_one_device)."""
    from tensorboard.backend.event_processing import event_accumulator

    tb = jt.TensorBoardLogger()
    t = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, eval_every_n_steps=3,
                     callbacks=[DeviceValues(), tb, jt.CSVLogger()])
    t.fit(toys.StepNumbers())
    assert t.num_devices == 4
    acc = event_accumulator.EventAccumulator(tb.log_dir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("loss", "env_steps", "steps_per_second", "dev/f32", "dev/bf16", "dev/int", "eval/mse"):
        assert tag in tags, (tag, tags)
    assert [(e.step, e.value) for e in acc.Scalars("step_number")] == [(2, 1.5), (4, 3.5), (6, 5.5)]
    assert [e.step for e in acc.Scalars("eval/mse")] == [3, 6]
    assert [(e.step, e.value) for e in acc.Scalars("dev/f32")] == [(2, 1.0), (4, 2.0), (6, 3.0)]
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        rows = [(r["step"], r["step_number"], bool(r["eval/mse"])) for r in csv.DictReader(f)]
    assert rows == [("2", "1.5", False), ("3", "", True), ("4", "3.5", False), ("6", "", True),
                    ("6", "5.5", False)]
    # evaluation rows carry step and env_steps too (same values at the same step)
    assert sorted({(e.step, e.value) for e in acc.Scalars("env_steps")}) == [(2, 16), (3, 24), (4, 32), (6, 48)]
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f) if r["loss"]]
    np.testing.assert_allclose([e.value for e in acc.Scalars("loss")], losses, rtol=1e-6)
    # hyperparameters once: a text table and the HParams plugin entry
    assert len(acc.Tensors("hparams/text_summary")) == 1
    assert "_hparams_/experiment" in acc.summary_metadata or any(
        "hparams" in k for k in acc.summary_metadata)


def test_tensorboard_resume_purges_steps_after_the_checkpoint_and_logs_hparams_once(run_dir,
                                                                                    monkeypatch):
    """Also when the resume opens its event file within the same second as the
    first run (tensorboardX names files by the second: the resume truncated the
    first run's file, leaving steps 5 and 6 only)."""
    import types

    import tensorboardX.event_file_writer as efw
    from tensorboard.backend.event_processing import event_accumulator

    monkeypatch.setattr(efw, "time", types.SimpleNamespace(time=lambda: 1_790_000_000.25))
    toys.trainer(run_dir, max_steps=4, callbacks=[jt.TensorBoardLogger()]).fit(toys.Regression())
    t = toys.trainer(run_dir, max_steps=6, callbacks=[jt.TensorBoardLogger()])
    t.fit(toys.Regression(), ckpt_path="last")
    acc = event_accumulator.EventAccumulator(os.path.join(t.log_dir, "tensorboard"),
                                             size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3, 4, 5, 6]
    assert len(acc.Tensors("hparams/text_summary")) == 1


def _wandb_records(path):
    """Records of a ``.wandb`` file (LevelDB-style log: 32 KiB blocks of
    ``crc32 | length | type`` framed chunks after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, buf = open(path, "rb").read(), 7, 32768, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            yield rec


def test_wandb_offline_run_directory_holds_history_and_config(run_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    wl = jt.WandbLogger(project="tests")
    t = toys.trainer(run_dir, max_steps=4, log_every_n_steps=2, eval_every_n_steps=3,
                     callbacks=[DeviceValues(), wl])
    t.fit(toys.StepNumbers(lr=0.03))
    assert wl.run is None  # finished
    files = glob.glob(os.path.join(t.log_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1
    history, config = [], {}
    for rec in _wandb_records(files[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "config":
            config.update({u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in rec.config.update})
    # the evaluation at step 3 is a row of its own; the training rows keep 2-step means
    assert [h["_step"] for h in history] == [2, 3, 4]
    assert ["eval/mse" in h for h in history] == [False, True, False]
    assert [h.get("step_number") for h in history] == [1.5, None, 3.5]
    assert [h["env_steps"] for h in history] == [16, 24, 32]
    assert [h["dev/f32"] for h in history if "loss" in h] == [1.0, 2.0]
    assert all(isinstance(h["loss"], float) for h in history if "eval/mse" not in h)
    assert config["module/lr"] == 0.03 and config["trainer/max_steps"] == 4


def test_wandb_disabled_is_a_no_op(run_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    t = toys.trainer(run_dir, max_steps=2, callbacks=[jt.WandbLogger()])
    t.fit(toys.Regression())
    assert not glob.glob(os.path.join(t.log_dir, "wandb", "offline-run-*"))
    with pytest.raises(ValueError, match="mode="):
        jt.WandbLogger(mode="sometimes")


def test_loggers_reject_arrays_and_close_on_the_error(run_dir):
    class Bad(jt.Callback):
        order = -10

        def on_train_steps_end(self, trainer, module, metrics):
            if trainer.global_step == 2:
                metrics["vector"] = jnp.zeros(3)

    csv_logger, tb = jt.CSVLogger(), jt.TensorBoardLogger()
    t = toys.trainer(run_dir, max_steps=5, callbacks=[Bad(), csv_logger, tb])
    with pytest.raises(TypeError, match="'vector' has shape"):
        t.fit(toys.Regression())
    assert tb.writer is None and not csv_logger._active
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        assert [r["step"] for r in csv.DictReader(f)] == ["1"]
    with open(os.path.join(t.log_dir, "hparams.csv")) as f:
        assert "trainer/max_steps" in f.read()


def test_loggers_get_every_fused_interval_at_its_step(run_dir):
    """Fused log intervals (no callback needs the state): the CSV and TensorBoard
    files hold one row / one scalar per log interval at its own step, with the
    values of a run that syncs at every interval."""
    from tensorboard.backend.event_processing import event_accumulator

    logged = {}
    for sync in (0, 60.0):
        root = os.path.join(run_dir, f"sync{sync}")
        tb = jt.TensorBoardLogger()
        t = toys.trainer(root, max_steps=12, log_every_n_steps=2, callbacks=[tb, jt.CSVLogger()],
                         sync_every_n_seconds=sync)
        t.fit(toys.Regression())
        with open(os.path.join(t.log_dir, "metrics.csv")) as f:
            rows = [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(f)]
        acc = event_accumulator.EventAccumulator(tb.log_dir, size_guidance={"scalars": 0})
        acc.Reload()
        assert [(e.step, e.value) for e in acc.Scalars("env_steps")] == [
            (s, 8.0 * s) for s in range(2, 13, 2)]
        np.testing.assert_allclose([e.value for e in acc.Scalars("loss")], [r[1] for r in rows],
                                   rtol=1e-6)
        logged[sync] = rows
    assert [s for s, _ in logged[60.0]] == list(range(2, 13, 2))
    assert logged[60.0] == logged[0]


@pytest.mark.slow
def test_an_evaluation_cuts_no_log_interval_on_one_device(run_dir):
    """log_every_n_steps=2, eval_every_n_steps=3 on one device (a process of its
    own), one call per segment: training rows at 2, 4, 6 with the means of their
    two steps, evaluation rows at 3 and 6, in the CSV file and TensorBoard;
    the budget's end (7) logs the last, shorter interval. One compiled training
    program serves every segment length (1 and 2 steps)."""
    code = f"""
import csv, os
from tensorboard.backend.event_processing import event_accumulator
import jaxtrainer as jt
from tests._support import toys
compiles = []
for sync in (0,):
    tb = jt.TensorBoardLogger()
    t = toys.trainer({str(run_dir)!r} + str(sync), max_steps=7, log_every_n_steps=2,
                     eval_every_n_steps=3, sync_every_n_seconds=sync,
                     callbacks=[jt.CSVLogger(), tb])
    compile_train = t.strategy.compile_train
    t.strategy.compile_train = lambda *a: compiles.append(sync) or compile_train(*a)
    t.fit(toys.StepNumbers())
    assert t.num_devices == 1 and compiles.count(sync) == 1, compiles
    rows = [(r["step"], r["step_number"], bool(r["eval/mse"]))
            for r in csv.DictReader(open(os.path.join(t.log_dir, "metrics.csv")))]
    assert rows == [("2", "1.5", False), ("3", "", True), ("4", "3.5", False), ("6", "", True),
                    ("6", "5.5", False), ("7", "7.0", False)], rows
    acc = event_accumulator.EventAccumulator(tb.log_dir, size_guidance={{"scalars": 0}})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("step_number")] == [
        (2, 1.5), (4, 3.5), (6, 5.5), (7, 7.0)]
    assert [e.step for e in acc.Scalars("eval/mse")] == [3, 6]
print("ok")
"""
    assert toys.run_python(code, devices=1, timeout=240).stdout.strip().endswith("ok")


def test_hparams_csv_keeps_the_hyperparameters_the_run_started_with(run_dir):
    toys.trainer(run_dir, max_steps=2, callbacks=[jt.CSVLogger()]).fit(toys.Regression(lr=0.05))
    path = os.path.join(run_dir, "version_0", "hparams.csv")
    first = open(path).read()
    assert "module/lr,0.05" in first.splitlines()
    toys.trainer(run_dir, max_steps=3, callbacks=[jt.CSVLogger()]).fit(
        toys.Regression(lr=0.07), ckpt_path="last")
    # the checkpoint's lr goes on; the budget is the one the run was last given
    assert "trainer/max_steps,2" in first.splitlines()
    assert open(path).read() == first.replace("trainer/max_steps,2", "trainer/max_steps,3")


class UnclippedRegression(toys.Regression):
    def hparams(self):
        return {"max_grad_norm": float("inf"), "lr": 3e-4}


def test_tensorboard_takes_a_non_finite_hyperparameter_without_a_warning(run_dir, caplog):
    """``max_grad_norm=inf`` (no clipping) is a legitimate hyperparameter: it is
    written, as text, with no "NaN or Inf found" warning from tensorboardX."""
    from tensorboard.backend.event_processing import event_accumulator

    tb = jt.TensorBoardLogger()
    t = toys.trainer(run_dir, max_steps=2, log_every_n_steps=2, callbacks=[tb])
    with caplog.at_level("WARNING"):
        t.fit(UnclippedRegression())
    assert not [r for r in caplog.records if "Inf" in r.getMessage()]
    acc = event_accumulator.EventAccumulator(tb.log_dir, size_guidance={"tensors": 0})
    acc.Reload()
    texts = [e.tensor_proto.string_val[0].decode() for e in acc.Tensors("hparams/text_summary")]
    assert len(texts) == 1 and "max_grad_norm | inf |" in texts[0], texts


def test_wandb_follows_wandbs_own_mode(run_dir, monkeypatch):
    """mode=None goes to wandb.init as None: wandb picks (WANDB_MODE, its
    settings, online when logged in); jaxtrainer never forces offline."""
    import wandb

    seen = []
    monkeypatch.delenv("WANDB_MODE", raising=False)

    def fake_init(**kwargs):
        seen.append(kwargs)
        return None

    monkeypatch.setattr(wandb, "init", fake_init)
    toys.trainer(run_dir, max_steps=2, callbacks=[jt.WandbLogger()]).fit(toys.Regression())
    toys.trainer(run_dir, max_steps=2, callbacks=[jt.WandbLogger(mode="offline")]).fit(toys.Regression())
    assert [k["mode"] for k in seen] == [None, "offline"]
    assert "id" not in seen[0] and "resume" not in seen[0]  # a fresh run: wandb makes a new id


def test_wandb_resume_continues_the_run_id_and_a_fresh_run_gets_a_new_one(run_dir, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))

    def fit(max_steps, wl, **kw):
        t = toys.trainer(run_dir, max_steps=max_steps, callbacks=[jt.CSVLogger(), wl,
                                                                 jt.ModelCheckpoint(async_save=False)])
        t.fit(toys.Regression(), **kw)
        return t

    first = jt.WandbLogger(project="tests")
    t = fit(2, first)
    resumed = jt.WandbLogger(project="tests")
    fit(4, resumed, ckpt_path="last")
    assert first.run_id and resumed.run_id == first.run_id
    runs_dirs = glob.glob(os.path.join(t.log_dir, "wandb", "offline-run-*"))
    # offline-run-<time>-<id>, and wandb adds -1 when the resumed run starts within the
    # first one's second (both are the same run: same id)
    assert len(runs_dirs) == 2 and all(
        re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{first.run_id}(-\d+)?", os.path.basename(d))
        for d in runs_dirs), runs_dirs
    fit(2, first)  # the same logger object, a fresh run (version_1)
    assert first.run_id != resumed.run_id
    # the runs live in their run directories, nothing in WANDB_DIR
    assert not (tmp_path / "wandb_dir").exists() or not os.listdir(tmp_path / "wandb_dir")


def _fit_logging_to_wandb(run_dir, max_steps, logger, **kw):
    t = toys.trainer(run_dir, max_steps=max_steps, callbacks=[
        jt.CSVLogger(), logger, jt.ModelCheckpoint(every_n_steps=2, async_save=False)])
    t.fit(toys.Regression(), **kw)
    return t


def test_wandb_resume_from_an_earlier_checkpoint_rewinds_the_run_to_its_step(run_dir, monkeypatch,
                                                                             capsys):
    """Steps 1..6 logged, resumed from step 2 to 8: wandb would drop steps 3..6."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    first = jt.WandbLogger(project="tests")
    t = _fit_logging_to_wandb(run_dir, 6, first)
    capsys.readouterr()
    resumed = jt.WandbLogger(project="tests")
    _fit_logging_to_wandb(run_dir, 8, resumed, ckpt_path=f"{t.log_dir}/checkpoints/2")
    out = capsys.readouterr().out
    assert resumed.run_id == first.run_id
    files = glob.glob(os.path.join(t.log_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 2  # the first run's and the resumed one's (told apart by content:
    by_file = {f: list(_wandb_records(f)) for f in files}  # equal mtimes happen under load)
    # a file's run records (wandb may write its run record again, updated, later on)
    runs = {f: [r.run for r in rs if r.WhichOneof("record_type") == "run"]
            for f, rs in by_file.items()}
    newest, run = next((f, run) for f, rs in runs.items() for run in rs if run.branch_point.run)
    records = by_file[newest]
    assert (run.run_id, run.branch_point.run, run.branch_point.metric, run.branch_point.value) \
        == (first.run_id, first.run_id, "_step", 2)
    steps = [json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "history"
             for i in r.history.item if (i.key or "/".join(i.nested_key)) == "_step"]
    assert steps == [3, 4, 5, 6, 7, 8]
    assert (f"WandbLogger: rewinding wandb run {first.run_id} to step 2 (resume_from="
            f"'{first.run_id}?_step=2'): the run went on to the checkpoints 4, 6") in out


def test_wandb_files_are_written_when_fit_returns(run_dir, monkeypatch):
    """A tiny offline fit, and a resume of it: the run's ``.wandb`` file holds the
    whole run, exit record included, right when ``fit`` returns (``finish()``
    returned before wandb's service wrote it: often the 7-byte header alone)."""
    monkeypatch.setenv("WANDB_MODE", "offline")

    def written(file):
        kinds = [r.WhichOneof("record_type") for r in _wandb_records(file)]
        return os.path.getsize(file) > 7, kinds.count("history"), "exit" in kinds

    t = _fit_logging_to_wandb(run_dir, 6, jt.WandbLogger(project="tests"))
    pattern = os.path.join(t.log_dir, "wandb", "offline-run-*", "run-*.wandb")
    first = glob.glob(pattern)
    assert len(first) == 1 and written(first[0]) == (True, 6, True)
    _fit_logging_to_wandb(run_dir, 8, jt.WandbLogger(project="tests"),
                          ckpt_path=f"{t.log_dir}/checkpoints/2")
    resumed = [f for f in glob.glob(pattern) if f not in first]
    assert len(resumed) == 1 and written(resumed[0]) == (True, 6, True)  # steps 3..8


def test_wandb_resume_from_the_newest_checkpoint_is_a_plain_resume(run_dir, monkeypatch, capsys):
    import wandb

    class Run:
        id = "run42"
        config = types.SimpleNamespace(update=lambda *a, **k: None)

        def log(self, *a, **k):
            pass

        def finish(self, *a, **k):
            pass

    seen = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: seen.append(kwargs) or Run())
    t = _fit_logging_to_wandb(run_dir, 4, jt.WandbLogger())
    _fit_logging_to_wandb(run_dir, 6, jt.WandbLogger(), ckpt_path="last")  # from step 4
    _fit_logging_to_wandb(run_dir, 8, jt.WandbLogger(), ckpt_path=f"{t.log_dir}/checkpoints/4")
    assert [{k: v for k, v in kw.items() if k in ("id", "resume", "resume_from")} for kw in seen] \
        == [{}, {"id": "run42", "resume": "allow"}, {"resume_from": "run42?_step=4"}]
    out = capsys.readouterr().out
    assert "WandbLogger: resuming wandb run run42 at step 4" in out
    assert "the run went on to the checkpoint 6," in out


def test_tensorboard_opens_on_a_thread_writes_in_the_loop_and_raises_a_write_error(run_dir,
                                                                                 monkeypatch):
    import threading

    from jaxtrainer.loggers.tensorboard import TensorBoardLogger

    threads, opened_on, write, open_writer = [], [], TensorBoardLogger._write_scalars, \
        TensorBoardLogger._open

    def recorded(self, values, step):
        threads.append(threading.current_thread().name)
        write(self, values, step)

    def slow_open(self):
        opened_on.append(threading.current_thread().name)
        time.sleep(0.3)  # still opening when the next rows are logged: they wait in the queue
        open_writer(self)

    monkeypatch.setattr(TensorBoardLogger, "_write_scalars", recorded)
    monkeypatch.setattr(TensorBoardLogger, "_open", slow_open)
    tb = jt.TensorBoardLogger()
    toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, callbacks=[tb]).fit(toys.Regression())
    assert opened_on == ["jaxtrainer-tensorboard-open_0"]
    assert threads == ["MainThread"] * 3 and tb.writer is None
    assert [n for n in threading.enumerate() if n.name.startswith("jaxtrainer-tensorboard")] == []
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(tb.log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == [2, 4, 6]  # the queued rows too, in order

    def full_disk(self, values, step):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TensorBoardLogger, "_open", open_writer)
    monkeypatch.setattr(TensorBoardLogger, "_write_scalars", full_disk)
    tb, csv_logger = jt.TensorBoardLogger(), jt.CSVLogger()
    t = toys.trainer(run_dir, max_steps=4, log_every_n_steps=2, callbacks=[tb, csv_logger])
    with pytest.raises(OSError, match="No space left on device"):
        t.fit(toys.Regression())
    assert tb.writer is None  # closed all the same
    # the failed write of step 2 is raised by the log call that writes it: at step 2
    # (before the CSV logger's turn: no CSV row yet, so no file) when the writer was open
    # by then, else at step 4 or when the run ends; the CSV file is then complete up to
    # there and closed all the same
    path = os.path.join(t.log_dir, "metrics.csv")
    if os.path.exists(path):
        with open(path) as f:
            assert [int(r["step"]) for r in csv.DictReader(f)] in ([2], [2, 4])


def test_wandb_gets_a_wandb_image_with_its_step_as_x_axis(tmp_path):
    """``Logger.log_image`` (the Pareto front NSGA-II's FrontReport draws): a
    ``wandb.Image`` with ``image/step`` as its x axis; the CSV logger ignores it."""
    import wandb
    from PIL import Image

    logged, defined = [], []
    logger = jt.WandbLogger(mode="disabled")
    logger.run = types.SimpleNamespace(log=lambda values: logged.append(values),
                                 define_metric=lambda *a, **k: defined.append((a, k)))
    png = tmp_path / "front.png"
    Image.new("RGB", (4, 3), "white").save(png)
    logger.log_image("moo/front", str(png), 250)
    assert defined == [(("moo/front",), {"step_metric": "image/step"})]
    (values,) = logged
    assert values["image/step"] == 250 and isinstance(values["moo/front"], wandb.Image)
    assert jt.CSVLogger().log_image("moo/front", str(png), 250) is None
