"""What ``jaxtrainer eval`` runs (:mod:`jaxtrainer.commands._eval_cli` parses its
arguments without importing JAX, then imports this): the checkpoint restored
into its module, the episodes, their statistics and the video."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _arguments as arguments
from jaxtrainer._formatting import fixed
from jaxtrainer.commands._eval_cli import BEST
from jaxtrainer.distributed import member_scope, psum
from jaxtrainer.distributed.keys import root_key
from jaxtrainer.envs.evaluation import episode_share, run_episodes
from jaxtrainer.metrics import Max, Mean, Min, Sum
from jaxtrainer.module import Module, RankedMembers, counted_members, members_of
from jaxtrainer.runtime._signals import ACTIVITY, StopOnSignal
from jaxtrainer.trainer import Trainer

STATISTICS = ("episode_return", "episode_length")

VIDEO_KEY = 0x766964
"""Folded into ``key(seed)`` for the ``--video`` episodes (fresh episodes of
their own, not the evaluated ones)."""


def _summaries(name: str, values: jax.Array, mask: jax.Array, mean: Mean) -> dict[str, Any]:
    """``eval/<name>`` (``mean``) and its ``_var``, ``_min`` and ``_max`` over
    the episodes of ``mask`` on every device (``values``: this device's)."""
    total, count = psum(mean.total), psum(mean.count)
    centre = total / jnp.maximum(count, 1.0)
    return {f"eval/{name}": mean,
            f"eval/{name}_var": Mean.of((values.astype(jnp.float32) - centre) ** 2, mask),
            f"eval/{name}_min": Min.of(values, mask),
            f"eval/{name}_max": Max.of(values, mask)}


class EpisodeStatistics(Module):
    """The module a Trainer runs, whose evaluation also reports the spread of
    the episodes: the same episodes as ``module.evaluation_step`` (the same
    policy, params, key and count, through
    :func:`jaxtrainer.envs.evaluation.run_episodes`), so ``eval/episode_return``
    equals the module's own evaluation.

    Metrics: for ``x`` in ``episode_return``, ``episode_length``: ``eval/x``
    (mean over completed episodes), ``eval/x_var`` (population variance about
    that mean), ``eval/x_min``, ``eval/x_max``; ``eval/episodes`` (completed
    episodes, :class:`~jaxtrainer.metrics.Sum`). For a population of members
    (PBT, sweeps): those of member ``member`` (default: PBT's member with the
    best current fitness, as ``PBT.evaluation_step`` chooses it; a sweep's 0).

    Everything else (state, training, checks) is the wrapped module's.
    """

    def __init__(self, module: Module, member: int | None = None) -> None:
        from jaxtrainer.policy import policy_spec

        self.module = module
        self.member = member  # of a population of members: the one evaluated
        self.spec = policy_spec(module)  # TypeError now for a module without a policy
        self.env_steps_per_step = module.env_steps_per_step
        self.step_key_per_device = module.step_key_per_device

    def configure_budget(self, max_steps: int) -> None:
        self.module.configure_budget(max_steps)

    def validate(self, num_devices: int) -> None:
        self.module.validate(num_devices)

    def init_state(self, key: jax.Array) -> Any:
        return self.module.init_state(key)

    def training_step(self, state: Any, key: jax.Array) -> tuple[Any, dict]:
        return self.module.training_step(state, key)

    def hparams(self) -> dict[str, Any]:
        return self.module.hparams()

    def _episodes(self, params: Any, key: jax.Array):
        spec = self.spec
        num, first = episode_share(spec.eval_episodes)
        return run_episodes(spec.env, spec.greedy, params, key, num,
                            initial_carry=spec.initial_carry, first_episode=first)

    def evaluation_step(self, state: Any, key: jax.Array) -> dict[str, Any]:
        module = members_of(self.module)
        if module is not None:
            return self._one_member(module, state, key)
        ep = self._episodes(self.spec.params(state), key)
        metrics = {"eval/episodes": Sum.of(ep.finished.astype(jnp.float32))}
        for name, values in zip(STATISTICS, (ep.returns, ep.lengths), strict=True):
            metrics.update(_summaries(name, values, ep.finished, Mean.of(values, mask=ep.finished)))
        return metrics

    def _one_member(self, population: Any, state: Any, key: jax.Array) -> dict[str, Any]:
        """As the population's ``evaluation_step``: every member on its own key,
        reported for member :attr:`member` (a mask here); without one, PBT's
        member of the best current fitness."""
        layout = population.layout
        ids = layout.ids()

        def member(member_state, member_key):
            ep = self._episodes(self.spec.params(member_state), member_key)
            means = [Mean.of(v, mask=ep.finished) for v in (ep.returns, ep.lengths)]
            return ep, means

        keys = population.evaluation_keys(state, key)  # over the devices: outside the members' scope
        with member_scope(population.axis_name):
            ep, means = jax.vmap(member)(state.members, keys)
        if self.member is not None:
            best = jnp.int32(self.member)
        elif isinstance(population, RankedMembers):  # PBT: the best now
            best = layout.rank(layout.gather(population.current_fitness(state)))[0]
        else:
            best = jnp.int32(0)
        is_best = ids == best
        mask = ep.finished & is_best[:, None]
        metrics = {"eval/episodes": Sum.of(mask.astype(jnp.float32))}
        for name, values, m in zip(STATISTICS, (ep.returns, ep.lengths), means, strict=True):
            centre = m.total / jnp.maximum(m.count, 1.0)  # each member's own mean
            deviation = jnp.sum(jnp.where(ep.finished, (values - centre[:, None]) ** 2, 0.0), -1)
            metrics.update({
                f"eval/{name}": m.over_members(is_best),
                f"eval/{name}_var": Mean(deviation, m.count).over_members(is_best),
                f"eval/{name}_min": Min.of(values, mask),
                f"eval/{name}_max": Max.of(values, mask)})
        return metrics


def _check_counts(episodes: Any, seed: Any, video_episodes: Any) -> None:
    """Raise ValueError naming ``--episodes``, ``--seed`` or ``--video-episodes`` when
    it is not a positive int (any int for the seed; ``None`` for the first two)."""
    if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int)
                                 or episodes < 1):
        raise ValueError(f"--episodes {episodes!r}: expected a positive int")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"--seed {seed!r}: expected an int")
    if isinstance(video_episodes, bool) or not isinstance(video_episodes, int) or video_episodes < 1:
        raise ValueError(f"--video-episodes {video_episodes!r}: expected a positive int")


def _checked_population(module: Any, member: Any) -> tuple[Any, int | None]:
    """``(members_of(module), member)`` after checking ``--member`` against it
    (ValueError); ``best`` becomes ``None``, the population's default (its best fitness)."""
    population = members_of(module)
    if member == BEST:
        if not isinstance(population, RankedMembers):
            raise ValueError(f"--member best: {type(module).__name__} ranks no members by fitness "
                             "(PBT and searches do); name a member, --member I")
        return population, None
    if member is not None and (isinstance(member, bool) or not isinstance(member, int)):
        raise ValueError(f"--member {member!r}: expected an int or 'best'")
    if member is not None and population is None:
        raise ValueError(f"--member {member}: {type(module).__name__} is one agent, not a "
                         "population of members (PBT or a sweep)")
    if member is not None and not 0 <= member < population.population_size:
        raise ValueError(f"--member {member}: expected an index in "
                         f"[0, {population.population_size})")
    return population, member


def _prepare(trainer: Trainer, stats: EpisodeStatistics, episodes: int | None) -> None:
    """``trainer.prepare(stats)``: a size the module refuses in ``eval_episodes``
    is named as the user wrote it, ``--episodes``."""
    try:
        trainer.prepare(stats)
    except ValueError as e:
        if episodes is None or f"eval_episodes={episodes} " not in str(e):
            raise
        raise ValueError(str(e).replace(f"eval_episodes={episodes} ",
                                        f"--episodes {episodes} ")) from None


def evaluate_run(path: str | os.PathLike, *, ckpt: str | int | None = None,
                 episodes: int | None = None, seed: int | None = None,
                 strategy: Any = "single", devices: Any = "auto",
                 video: str | os.PathLike | None = None, video_episodes: int = 1,
                 member: int | str | None = None,
                 report: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Evaluate a saved run's checkpoint (what ``jaxtrainer eval`` prints).

    Args:
      path: a run directory, its ``checkpoints`` directory or a step directory.
      ckpt: ``None``/``"last"`` (newest), ``"best"`` or a step number.
      episodes: evaluation episodes (the config's ``algorithm.eval_episodes``
        by default; with ``video`` and no ``episodes``, none: only the video's
        episodes run, and the numbers are theirs); must divide by the device count.
      seed: ``None``: the run's root key; else ``key(seed)``.
      strategy, devices: as the Trainer's.
      video: write ``video_episodes`` fresh episodes there (``.gif``/``.mp4``
        for gymnax, ``.html`` for brax).
      member: of a population (PBT, sweeps, searches), the member evaluated, or
        ``"best"`` (PBT, searches: the best current fitness, also the default;
        a sweep's default is member 0); named in the result.
      report: called with the result (``video_frames`` ``None``) once the
        evaluation (or the video's episodes) is done, before the video is drawn.

    Returns:
      ``{"checkpoint", "step", "env_steps", "counted_members", "seed", "episodes",
      "completed", "metrics", "video_frames", "member", "video_only"}`` (``counted_members``:
      a sweep's or search's members, else 1; ``member``: ``(index, size)`` or ``None``); ``metrics`` is ``trainer.evaluate``'s dict
      of :class:`EpisodeStatistics` with ``eval/<x>_std`` (the square root of
      ``_var``, ``float``) added.

    Raises:
      ValueError: a bad argument (naming it), before anything compiles.
      FileNotFoundError: no checkpoint or no ``config.yaml`` there.
      StorageError: the video cannot be written there (checked before anything
        runs) or writing it failed (the previous file of that name intact).
    """
    from jaxtrainer.commands import _render as render
    from jaxtrainer.inference import saved_run

    _check_counts(episodes, seed, video_episodes)
    video = None if video is None else arguments.expand_path(video)
    if video is not None:
        render.check_output_path(video)
    overrides = None if episodes is None else {"algorithm.eval_episodes": episodes}
    trainer, module, _, cfg, step_dir = saved_run.prepare(
        path, ckpt, overrides=overrides, strategy=strategy, devices=devices)
    population, member = _checked_population(module, member)
    stats = EpisodeStatistics(module, member)
    if video is not None:
        env = stats.spec.env
        render.check_video_path(getattr(env, "unwrapped", env).name, video)
    _prepare(trainer, stats, episodes)  # devices and size checks: errors before any line
    ACTIVITY.enter(f"restoring {step_dir}", f"restoring checkpoint {step_dir} ...")
    meta = trainer.restore_checkpoint(stats, step_dir)
    if population is not None and member is None:
        stats.member = member = population.default_member(trainer.state)
    used_seed = int(meta.get("seed", 0)) if seed is None else seed
    video_only = video is not None and episodes is None  # no evaluation nobody asked for
    recorded = _record_video(module, trainer.state, member, used_seed, video_episodes) \
        if video_only else None
    metrics = _video_statistics(recorded[1]) if recorded else _evaluate(trainer, stats, seed)
    result = {"checkpoint": os.fspath(step_dir), "step": trainer.global_step,
              "env_steps": trainer.env_steps, "seed": used_seed, "counted_members":
              1 if population is None else counted_members(population),
              "episodes": video_episodes if video_only else stats.spec.eval_episodes,
              "completed": int(round(metrics.get("eval/episodes", 0.0))),
              "metrics": metrics, "video_frames": None, "video_only": video_only,
              "member": None if population is None else (member, population.population_size),
              "member_note": None if population is None else
              population.describe_member(trainer.state, member)}
    if report is not None:
        report(result)
    if video is not None:  # the episodes drawn, recorded now where not yet
        env, episodes = recorded or _record_video(module, trainer.state, member, used_seed,
                                                  video_episodes)
        result["video_frames"] = render.write_episodes(env, episodes, video)
    return result


def _evaluate(trainer: Trainer, stats: EpisodeStatistics, seed: int | None) -> dict[str, Any]:
    """``Trainer.evaluate`` of ``stats`` (its episodes drawn from ``key(seed)``, or
    the run's root key) with ``eval/<x>_std`` (the square root of ``_var``) added:
    the numbers ``jaxtrainer eval`` prints."""
    ACTIVITY.enter(f"evaluating {stats.spec.eval_episodes} episodes", f"evaluating "
                   f"{stats.spec.eval_episodes} episodes of step {trainer.global_step} ...")
    # Trainer's own evaluate: a PopulationTrainer's would wrap the (already wrapped) module
    metrics = Trainer.evaluate(trainer, stats, seed=seed)
    for name in STATISTICS:
        if f"eval/{name}_var" in metrics:
            metrics[f"eval/{name}_std"] = math.sqrt(max(metrics[f"eval/{name}_var"], 0.0))
    return metrics


def _record_video(module: Module, state: Any, member: int | None, seed: int,
                  episodes: int) -> tuple[Any, list[Any]]:
    """``(env, recorded)``: ``episodes`` fresh episodes of the module's greedy policy
    for the video (:func:`jaxtrainer.commands._render.record`), keys from
    ``fold_in(key(seed), VIDEO_KEY)``."""
    from jaxtrainer.commands import _render as render
    from jaxtrainer.policy import params_of

    spec, params = params_of(module, state, member)
    params = jax.device_put(jax.device_get(params))
    key = jax.random.fold_in(root_key(seed), VIDEO_KEY)
    return spec.env, render.record(spec.env, spec.greedy, params, key, episodes,
                                   spec.initial_carry)


def _video_statistics(recorded: list[Any]) -> dict[str, float]:
    """The ``eval/*`` statistics :func:`format_result` prints, of the video's
    episodes (:func:`jaxtrainer.commands._render.record`'s ``(states, returns)``:
    an episode's return is its last, its length the count of its steps)."""
    values = {"episode_return": np.array([float(r[-1]) for _, r in recorded]),
              "episode_length": np.array([float(len(r)) for _, r in recorded])}
    out = {"eval/episodes": float(len(recorded))}
    for name, v in values.items():
        out.update({f"eval/{name}": float(v.mean()), f"eval/{name}_std": float(v.std()),
                    f"eval/{name}_min": float(v.min()), f"eval/{name}_max": float(v.max())})
    return out


def format_result(result: dict[str, Any]) -> list[str]:
    """The lines ``jaxtrainer eval`` prints for an :func:`evaluate_run` result."""
    m = result["metrics"]
    counted = result.get("counted_members", 1)  # a sweep's or search's budget is per member
    env_steps = (f"env steps {result['env_steps']}" if counted == 1 else
                 f"env steps {result['env_steps'] // counted} per member x {counted} members")
    lines = [f"checkpoint {result['checkpoint']} (step {result['step']}, {env_steps}); "
             f"seed {result['seed']}",
             f"episodes: {result['completed']} completed of {result['episodes']}"
             + (" (the video's, no other evaluation: --episodes N for N evaluation episodes)"
                if result.get("video_only") else "")]
    if result.get("member") is not None:
        note = f", {result['member_note']}" if result.get("member_note") else ""
        lines.insert(1, f"member {result['member'][0]} of {result['member'][1]}{note} (--member I "
                        "for another)")
    for name in STATISTICS:
        if f"eval/{name}" in m:
            lines.append(f"{name}: mean={fixed(m[f'eval/{name}'], 4)} "
                         f"std={fixed(m[f'eval/{name}_std'], 4)} "
                         f"min={m[f'eval/{name}_min']:g} max={m[f'eval/{name}_max']:g}")
        else:
            lines.append(f"{name}: no episode completed within the time limit")
    return lines


def _print_result(result: dict[str, Any]) -> None:
    for line in format_result(result):
        print(line, flush=True)


def evaluate_stopping_on_signal(args: argparse.Namespace, devices: Any) -> dict[str, Any]:
    """:func:`evaluate_run` for the command: phase lines on stderr, the numbers
    printed once evaluated (before the video), and the first SIGINT/SIGTERM
    ends the process (status 128 + signal), removing the temporary file of a
    video it was writing (a previous file of that name stays)."""
    from jaxtrainer.commands._render import headless_gl, remove_temporary

    headless_gl()  # before brax imports MuJoCo: a brax .gif is drawn without a display
    video = None if args.video is None else arguments.expand_path(args.video)
    with ACTIVITY.showing(True, "jaxtrainer eval"), \
            StopOnSignal(lambda: video is not None and remove_temporary(video), "jaxtrainer eval"):
        return evaluate_run(args.path, ckpt=args.ckpt, episodes=args.episodes, seed=args.seed,
                            strategy=args.strategy, devices=devices, video=video,
                            video_episodes=args.video_episodes, member=args.member,
                            report=_print_result)
