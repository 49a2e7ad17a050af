"""``make(name)``: environments by name."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from jaxtrainer import _arguments as arguments
from jaxtrainer.envs.base import Env, positive_steps
from jaxtrainer.envs.brax_env import BRAX_ENV_NAMES, RESET_MODES, BraxEnv
from jaxtrainer.envs.gymnax_env import GymnaxEnv, gymnax
from jaxtrainer.envs.masked import NO_VELOCITY, NO_VELOCITY_SUFFIX, ObservationMask
from jaxtrainer.envs.playground_env import PLAYGROUND_ENV_NAMES, PLAYGROUND_PREFIX
from jaxtrainer.runtime._optional import import_optional

_BRAX_PREFIX = "brax/"

FAMILIES = {
    "navix/": ("jaxtrainer.envs.navix_env", "make_navix"),
    "xminigrid/": ("jaxtrainer.envs.xminigrid_env", "make_xminigrid"),
    "gymnasium/": ("jaxtrainer.envs.gymnasium_env", "make_gymnasium"),
    "jumanji/": ("jaxtrainer.envs.jumanji_env", "make_jumanji"),
    "jaxmarl/": ("jaxtrainer.envs.jaxmarl_env", "make_jaxmarl"),
    "craftax/": ("jaxtrainer.envs.craftax_env", "make_craftax"),
    "envpool/": ("jaxtrainer.envs.envpool_env", "make_envpool"),
    "kinetix/": ("jaxtrainer.envs.kinetix_env", "make_kinetix"),
}
"""Optional families by name prefix: ``(adapter module, its make function)``; the
adapter (and with it the family's package) is imported when one of its names is made."""

_MULTI_AGENT_FAMILIES = {
    "jaxmarl/": ("jaxtrainer.envs.jaxmarl_env", "make_jaxmarl_multi_agent"),
}
"""Multi-agent families by name prefix, as :data:`FAMILIES`: what
:func:`make_multi_agent` builds (:func:`make` gives the same games seen as
single-agent envs, :class:`~jaxtrainer.envs.agents_as_envs.AgentsAsEnvs`)."""


def available() -> list[str]:
    """Every name :func:`make` accepts: gymnax's ``registered_envs``,
    ``brax/<name>`` for brax's environments and ``playground/<name>`` for MuJoCo
    Playground 0.2.0's, and ``<name>-NoVelocity`` for the gymnax names in
    :data:`~jaxtrainer.envs.masked.NO_VELOCITY` (listed without importing brax or Playground; the
    ``playground/`` ones need the ``playground`` extra, and its locomotion and
    manipulation ones the MuJoCo Menagerie assets on disk)."""
    return (list(gymnax.registered_envs) + [n + NO_VELOCITY_SUFFIX for n in NO_VELOCITY]
            + [_BRAX_PREFIX + n for n in BRAX_ENV_NAMES]
            + [PLAYGROUND_PREFIX + n for n in PLAYGROUND_ENV_NAMES])


def in_family(name: str) -> bool:
    """Whether ``name`` has an optional family's prefix (``navix/``, ...): such a
    name is checked by the family's own registry when it is made, since
    :func:`available` cannot list the names of packages it does not import."""
    return name.startswith(tuple(FAMILIES))


def unknown(name: str, key: str = "") -> ValueError:
    """The error for a name no family knows: the closest five names (among the
    names of its prefix, ``brax/`` or ``playground/``, when it has one) and how
    to list them all, in one line however many names the packages add.
    ``key`` is how the caller names the setting (``env.name``)."""
    names = available()
    prefix = name.split("/", 1)[0] + "/" if "/" in name else ""
    pool = [n for n in names if n.startswith(prefix)] if prefix else names
    near = arguments.closest(name, pool or names)
    shown = f"{key}={name!r}" if key else repr(name)
    return ValueError(f"unknown environment {shown}; closest: {', '.join(near) or 'none'}; "
                      f"`jaxtrainer envs` lists all {len(names)} (and the families named by a "
                      f"prefix: {', '.join(f'{p}<name>' for p in FAMILIES)})")


def _make_brax(name: str, episode_length: int = 1000, reset_mode: str = "first_state",
               **kwargs: Any) -> BraxEnv:
    """``brax/<env>`` as :func:`make` builds it (``kwargs``: the env constructor's)."""
    reset_mode = arguments.one_of("reset_mode", reset_mode, RESET_MODES)
    brax_envs = import_optional("brax.envs", "brax", f"make({name!r})")  # slow: brax names only

    try:
        env = brax_envs.get_environment(name[len(_BRAX_PREFIX):], **kwargs)
    except KeyError:
        raise unknown(name) from None
    return BraxEnv(env, episode_length=episode_length, name=name, reset_mode=reset_mode)


def make(name: str, observation_mask: Any = None, max_episode_steps: int | None = None,
         **kwargs: Any) -> Env:
    """Build an environment by name.

    Args:
      name: a gymnax id (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...),
        ``"brax/<env>"`` (``"brax/ant"``) or ``"playground/<env>"`` (a MuJoCo
        Playground registry name: ``"playground/CartpoleBalance"``); see
        :func:`available`.
      **kwargs: for gymnax, ``params=`` (an ``EnvParams`` replacing the defaults)
        and the env constructor's keyword arguments; for brax,
        ``episode_length=`` (default 1000), ``reset_mode=`` (``"first_state"``,
        default, or ``"exact"``: :data:`~jaxtrainer.envs.brax_env.RESET_MODES`)
        and the env constructor's keyword arguments (``backend=``, ...); for
        MuJoCo Playground, ``reset_mode=`` as brax's,
        ``episode_length=`` (time limit in control steps; default: the env
        config's, 1000 for the DeepMind Control Suite envs: reaching it is
        ``truncated``, the env's own ``done`` is ``terminated``),
        ``action_repeat=`` (default: the env config's, 1 for the suite),
        ``config_overrides=`` (a dict of env config entries, flat dotted keys
        or nested, as Playground's ``registry.load`` takes them; ``impl``
        defaults to ``"jax"``, MJX's pure-JAX implementation, unless given:
        ``{"impl": "warp"}`` for MuJoCo Warp on a CUDA GPU) and
        ``observation_key=`` (the entry of a dict observation, default
        ``"state"``); see :func:`jaxtrainer.envs.playground_env.make_playground`.
        Optional families, each an extra (``pip install -e ".[navix]"``;
        ``.[envs]`` for all): ``"navix/<name>"``, ``"xminigrid/<name>"``,
        ``"jumanji/<name>"`` (discrete or multi-discrete actions, ``float32[size]``
        flattened observations by default; see ``make_navix``, ``make_xminigrid``,
        ``make_jumanji`` in their ``jaxtrainer.envs.*_env`` modules), ``"craftax/<name>"``,
        ``"jaxmarl/<name>"``, the host families ``"gymnasium/<id>"`` and ``"envpool/<id>"``
        (``kinetix/`` names raise, see below).
        ``"<gymnax id>-NoVelocity"`` (``"CartPole-v1-NoVelocity"``): the env with
        its velocities hidden, a memory task (:data:`~jaxtrainer.envs.masked.NO_VELOCITY`).
      observation_mask: keep only these positions of the env's flat
        observations (``[0, 2]``: CartPole's cart position and pole angle), as
        :class:`~jaxtrainer.envs.masked.ObservationMask`; ``None``: all.
      max_episode_steps: truncate every episode, in training and evaluation
        alike, after this many steps (``truncated``, not ``terminated``), in
        every family, by :meth:`Env.set_time_limit`: the env's own counter
        where it has one (brax, Playground, Craftax, JaxMARL; Gymnasium's and
        EnvPool's ``max_episode_steps``, replacing the registered limit), else
        a reset at the limit (gymnax, Jumanji, navix, XLand-MiniGrid, masks;
        an env's own shorter limit still applies). ``None``: the env's own.

    Returns:
      An :class:`Env` with auto-reset, terminated/truncated kept apart and
      episode statistics. brax and Playground envs: observations
      ``float32[obs_dim]``, actions ``float32[action_size]`` in ``[-1, 1]``.

    Raises:
      ValueError: a bad ``observation_mask`` (naming it and the observation
        shape); ``max_episode_steps`` not a positive int; ``name`` is unknown (the message lists the available names;
        within an optional family it gives the closest of the family's names);
        a bad Playground keyword argument (the message names it), checked
        before anything is loaded or compiled.
      ImportError: a ``playground/`` name without MuJoCo Playground installed
        (``pip install "jaxtrainer[playground]"``), or a family's name without
        its package (one line naming the extra); any ``kinetix/`` name (its jax pin).
      FileNotFoundError: a Playground locomotion or manipulation env whose
        robot assets (MuJoCo Menagerie, which Playground clones from GitHub at
        run time) are not on disk; raised before any download is attempted,
        the message says how to get them.
    """
    if max_episode_steps is not None:
        limit = positive_steps(max_episode_steps)
        native = {"max_episode_steps": limit} if _takes_limit(name) else {}  # JaxMARL, Jumanji
        env = _make(name, observation_mask, **native, **kwargs)
        env.set_time_limit(limit)
        return env
    return _make(name, observation_mask, **kwargs)


def _make(name: str, observation_mask: Any = None, **kwargs: Any) -> Env:
    """:func:`make` without its ``max_episode_steps`` (for a family's
    constructor that takes one, in ``kwargs``)."""
    if observation_mask is not None:
        env = make(name, **kwargs)
        return ObservationMask(env, observation_mask, f"{env.name}{list(observation_mask)}")
    base = name[:-len(NO_VELOCITY_SUFFIX)] if name.endswith(NO_VELOCITY_SUFFIX) else None
    if base in NO_VELOCITY:
        return ObservationMask(make(base, **kwargs), NO_VELOCITY[base], name)
    family = next((p for p in FAMILIES if name.startswith(p)), None)
    if family is not None:
        module, function = FAMILIES[family]
        return getattr(importlib.import_module(module), function)(name[len(family):], **kwargs)
    if name.startswith(_BRAX_PREFIX):
        return _make_brax(name, **kwargs)
    if name.startswith(PLAYGROUND_PREFIX):
        from jaxtrainer.envs import playground_env  # imports Playground (slow) when called

        playground_name = name[len(PLAYGROUND_PREFIX):]
        if playground_name not in playground_env.registered_names():
            raise unknown(name)
        return playground_env.make_playground(playground_name, **kwargs)
    if name not in gymnax.registered_envs:
        raise unknown(name)
    params = kwargs.pop("params", None)
    env, default_params = gymnax.make(name, **kwargs)
    return GymnaxEnv(env, default_params if params is None else params, name=name)


def _takes_limit(name: str) -> bool:
    """Whether the make function of ``name``'s optional family names a
    ``max_episode_steps`` parameter of its own."""
    family = next((p for p in FAMILIES if name.startswith(p)), None)
    if family is None:
        return False
    module, function = FAMILIES[family]
    fn = getattr(importlib.import_module(module), function)
    return "max_episode_steps" in inspect.signature(fn).parameters


def make_multi_agent(name: str, **kwargs: Any) -> Any:
    """Build a multi-agent environment by name: a
    :class:`~jaxtrainer.envs.multi_agent.MultiAgentEnv`, agents on a leading axis.

    Args:
      name: ``"jaxmarl/<name>"``, a JaxMARL registry name
        (``"jaxmarl/MPE_simple_spread_v3"``, ``"jaxmarl/ant_4x2"``,
        ``"jaxmarl/overcooked"``; extra ``marl``).
      **kwargs: the family's (:func:`jaxtrainer.envs.jaxmarl_env.make_jaxmarl_multi_agent`).

    Raises:
      ValueError: a name outside the multi-agent families (the message lists
        their prefixes), or unknown within one (the closest names).
      ImportError: the family's package is not installed (one line naming the extra).
    """
    family = next((p for p in _MULTI_AGENT_FAMILIES if name.startswith(p)), None)
    if family is None:
        raise ValueError(f"unknown multi-agent environment {name!r}: multi-agent names start "
                         f"with one of {', '.join(repr(p) for p in _MULTI_AGENT_FAMILIES)} "
                         "(e.g. 'jaxmarl/MPE_simple_spread_v3')")
    module, function = _MULTI_AGENT_FAMILIES[family]
    return getattr(importlib.import_module(module), function)(name[len(family):], **kwargs)
