"""The interval planner: plain Python, no JAX (these tests run in milliseconds)."""

from jaxtrainer.trainer._planner import IntervalPlanner, stop_reason


def never(step):
    return False


def test_intervals_end_on_multiples_of_log_and_eval_intervals_and_at_the_budget():
    p = IntervalPlanner(max_steps=23, log_every_n_steps=10, eval_every_n_steps=4)
    starts, step = [], 0
    while step < 23:
        starts.append(step)
        step += p.interval_length(step)
    assert starts == [0, 4, 8, 10, 12, 16, 20]
    assert p.interval_length(20) == 3  # the budget ends the last one
    # a resumed run from step 7 logs at the same boundaries
    assert p.interval_length(7) == 1


def test_one_interval_per_call_until_a_speed_is_measured_or_when_fusing_is_off():
    p = IntervalPlanner(max_steps=100, log_every_n_steps=5, sync_every_n_seconds=1.0)
    assert p.plan(0, None, never) == [5]
    assert IntervalPlanner(100, 5, sync_every_n_seconds=0.0).plan(0, 0.001, never) == [5]
    assert IntervalPlanner(100, 5, sync_every_n_seconds=1.0, fuse=False).plan(0, 0.001, never) == [5]


def test_a_call_fuses_intervals_up_to_the_sync_time_a_boundary_or_the_row_limit():
    p = IntervalPlanner(max_steps=100, log_every_n_steps=5, sync_every_n_seconds=1.0)
    assert p.plan(0, 0.1, never) == [5, 5]  # 10 steps x 0.1 s = the 1 s target
    assert p.plan(0, 0.001, never) == [5] * 20  # up to the budget
    assert p.plan(90, 0.001, never) == [5, 5]
    assert p.plan(0, 0.001, lambda s: s == 15) == [5, 5, 5]  # a callback needs the state at 15
    assert IntervalPlanner(100, 5, eval_every_n_steps=20, sync_every_n_seconds=1.0).plan(
        0, 0.001, never) == [5, 5, 5, 5]  # an evaluation is a boundary
    assert IntervalPlanner(1000, 1, sync_every_n_seconds=9.0, max_intervals=128).plan(
        0, 1e-6, never) == [1] * 128
    assert p.plan(100, 0.001, never) == []


def test_run_ahead_only_where_nothing_needs_the_state():
    p = IntervalPlanner(max_steps=20, log_every_n_steps=5, eval_every_n_steps=10)
    assert p.can_run_ahead(5, True, never)
    assert not p.can_run_ahead(5, False, never)
    assert not p.can_run_ahead(10, True, never)  # an evaluation
    assert not p.can_run_ahead(20, True, never)  # the budget's end
    assert not p.can_run_ahead(15, True, lambda s: True)


def test_stop_reasons():
    assert stop_reason(5, 10, True, None) == "a callback set trainer.should_stop"
    assert stop_reason(5, 10, True, "EarlyStopping: x") == "EarlyStopping: x"
    assert stop_reason(10, 10, False, None) == "the budget of 10 training steps is done"
    assert stop_reason(5, 10, False, None) is None
