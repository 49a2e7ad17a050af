"""Adapter for MuJoCo Playground environments (PyPI package ``playground``,
module ``mujoco_playground``): ``make("playground/<name>")``.

Playground's envs are MJX simulations with brax's functional API
(``reset(rng) -> State``, ``step(state, action) -> State`` with ``obs``,
``reward``, ``done``, ``metrics``, ``info``), so :class:`PlaygroundEnv` is a
:class:`~jaxtrainer.envs.BraxEnv`: the same time limit, action repeat and
auto-reset, with Playground's per-env defaults (the env config's
``episode_length`` and ``action_repeat``).

``mujoco_playground`` is imported only when a ``playground/...`` environment is
made: the import takes seconds, and the package is optional
(``pip install "jaxtrainer[playground]"``).

Assets: the DeepMind Control Suite envs (:data:`_PLAYGROUND_SUITE_NAMES`) ship
their MJCF files in the package. The locomotion and manipulation envs
(:data:`_PLAYGROUND_MENAGERIE_NAMES`) load robots from MuJoCo Menagerie, which
Playground clones with ``git`` from GitHub into its own package directory the
first time one is loaded; :func:`make_playground` never starts that download
and raises :class:`FileNotFoundError` (saying how to get the assets) when the
clone is not there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax

from jaxtrainer import _arguments as arguments
from jaxtrainer.envs.brax_env import RESET_MODES, BraxEnv, Randomization, make_leaves_local

PLAYGROUND_PREFIX = "playground/"

_PLAYGROUND_SUITE_NAMES = (
    "AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance",
    "CartpoleBalanceSparse", "CartpoleSwingup", "CartpoleSwingupSparse", "CheetahRun",
    "FingerSpin", "FingerTurnEasy", "FingerTurnHard", "FishSwim", "HopperHop", "HopperStand",
    "HumanoidStand", "HumanoidWalk", "HumanoidRun", "PendulumSwingup", "PointMass",
    "ReacherEasy", "ReacherHard", "SwimmerSwimmer6", "WalkerRun", "WalkerStand", "WalkerWalk",
)
"""playground 0.2.0's DeepMind Control Suite envs (assets in the package),
listed without importing it."""

_PLAYGROUND_MENAGERIE_NAMES = (
    "ApolloJoystickFlatTerrain", "BarkourJoystick", "BerkeleyHumanoidJoystickFlatTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain", "G1JoystickFlatTerrain", "G1JoystickRoughTerrain",
    "Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain", "Go1Getup", "Go1Handstand",
    "Go1Footstand", "H1InplaceGaitTracking", "H1JoystickGaitTracking", "Op3Joystick",
    "SpotFlatTerrainJoystick", "SpotGetup", "SpotJoystickGaitTracking",
    "T1JoystickFlatTerrain", "T1JoystickRoughTerrain",
    "AlohaHandOver", "AlohaSinglePegInsertion", "PandaPickCube", "PandaPickCubeOrientation",
    "PandaPickCubeCartesian", "PandaOpenCabinet", "PandaRobotiqPushCube", "LeapCubeReorient",
    "LeapCubeRotateZAxis", "AeroCubeRotateZAxis",
)
"""playground 0.2.0's locomotion and manipulation envs, whose robot assets
(MuJoCo Menagerie) Playground downloads at run time."""

PLAYGROUND_ENV_NAMES = _PLAYGROUND_SUITE_NAMES + _PLAYGROUND_MENAGERIE_NAMES
"""Every env of playground 0.2.0's registry, in its order."""

IMPLS = ("jax", "warp")
"""MJX implementations a config's ``impl`` may name."""

_DEFAULT_IMPL = "jax"
"""The ``impl`` set unless ``config_overrides`` gives one: MJX's pure-JAX
implementation, compiled by XLA on any backend and traced like any JAX code
under every strategy (Playground 0.2.0's configs default to ``"warp"``, MuJoCo
Warp's CUDA kernels, which on a CPU compile for minutes)."""


def _import_playground() -> Any:
    """``mujoco_playground`` (slow import), or ImportError saying how to install it."""
    try:
        import mujoco_playground
    except ImportError as e:
        raise ImportError("playground/... environments need MuJoCo Playground: "
                          "pip install 'jaxtrainer[playground]' (PyPI package 'playground')"
                          ) from e
    return mujoco_playground


def registered_names() -> tuple[str, ...]:
    """The installed Playground's registry (``mujoco_playground.registry.ALL_ENVS``);
    imports it."""
    return tuple(_import_playground().registry.ALL_ENVS)


def _flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}`` (Playground's flattened override keys)."""
    flat = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _menagerie_missing(env_name: str) -> FileNotFoundError | None:
    """The error for an env whose assets Playground would download, when they are
    not there (``None`` when the env ships its assets or the clone exists)."""
    from mujoco_playground import dm_control_suite
    from mujoco_playground._src import mjx_env

    if env_name in dm_control_suite.ALL_ENVS:
        return None
    path = mjx_env.MENAGERIE_PATH  # read at call time (tests point it elsewhere)
    if path.exists():
        return None
    sha = mjx_env.MENAGERIE_COMMIT_SHA
    return FileNotFoundError(
        f"playground/{env_name}: MuJoCo Playground downloads this environment's robot assets "
        f"at run time (it clones MuJoCo Menagerie from GitHub with git into {path} on first "
        f"use), and they are not there; jaxtrainer does not start that download. To get them, "
        f"on a machine with network access: git clone "
        f"https://github.com/google-deepmind/mujoco_menagerie.git {path} && "
        f"git -C {path} checkout {sha} (or copy or symlink such a clone there). The DeepMind "
        f"Control Suite environments (playground/CartpoleBalance, playground/CheetahRun, ...) "
        f"ship their assets in the package.")


class PlaygroundEnv(BraxEnv):
    """A MuJoCo Playground ``MjxEnv`` behind the :class:`~jaxtrainer.envs.Env` interface.

    :class:`~jaxtrainer.envs.BraxEnv`'s stepping (Playground's envs have brax's
    API): ``terminated`` is the env's ``done`` (e.g. a NaN state or a fall),
    ``truncated`` the time limit; an ended episode restarts from its slot's
    first state (``reset_mode="first_state"``, as Playground's own training
    wrapper with ``full_reset=False``) or from a fresh ``env.reset``
    (``"exact"``, its ``full_reset=True``). Observations
    ``float32[obs_dim]``; actions ``float32[action_size]`` in ``[-1, 1]``.

    Args:
      env: a Playground env (``mujoco_playground.registry.load(name)``), not
        wrapped by ``wrap_for_brax_training`` (this adapter is that wrapper).
      episode_length: time limit in simulator control steps (Playground's
        ``wrap_for_brax_training(episode_length=)``); ``None``: the env
        config's ``episode_length`` (1000 for the DeepMind Control Suite envs).
      name: the id reported in :attr:`name`.
      action_repeat: control steps per :meth:`Env.step` (see
        :class:`~jaxtrainer.envs.BraxEnv`); ``None``: the env config's
        ``action_repeat`` (1 for the DeepMind Control Suite envs).
      observation_key: the entry of a dict observation the policy sees
        (Playground's ``policy_obs_key``; its policies' is ``"state"``).
      value_obs_key: the entry the critic sees (Playground's ``value_obs_key``;
        its asymmetric critics' is ``"privileged_state"``); ``None``: the
        policy's (see :class:`~jaxtrainer.envs.BraxEnv`).
      randomization: a domain randomisation function, e.g.
        ``mujoco_playground.registry.get_domain_randomizer(name)``: one model
        per env (see :class:`~jaxtrainer.envs.BraxEnv`); ``None``: none.
      reset_mode: ``"first_state"`` (default) or ``"exact"``
        (:data:`~jaxtrainer.envs.brax_env.RESET_MODES`).

    Raises:
      ValueError: ``episode_length`` or ``action_repeat`` is not a positive
        int, or an unknown ``reset_mode``.
    """

    def __init__(self, env: Any, episode_length: int | None = None, name: str = "playground",
                 *, action_repeat: int | None = None, observation_key: str = "state",
                 value_obs_key: str | None = None, randomization: Randomization | None = None,
                 reset_mode: str = "first_state") -> None:
        config = getattr(getattr(env, "unwrapped", env), "_config", None)
        if config is None:
            config = {}
        if episode_length is None:
            episode_length = config.get("episode_length", 1000)
        if action_repeat is None:
            action_repeat = config.get("action_repeat", 1)
        super().__init__(env, episode_length, name, action_repeat=action_repeat,
                         observation_key=observation_key, value_obs_key=value_obs_key,
                         randomization=randomization, reset_mode=reset_mode)

    _STEPPING_MODEL = "_mjx_model"

    def _model(self) -> Any:
        """The env's MJX model (``mjx_model``), what Playground's randomisation
        functions randomise."""
        return self.env.unwrapped.mjx_model

    def _make_process_local(self) -> None:
        """Rebuild on this process the arrays of the env's mjx model that another
        process holds; see :func:`~jaxtrainer.envs.brax_env.make_leaves_local`."""
        env = getattr(self.env, "unwrapped", self.env)
        model = getattr(env, "mjx_model", None)
        if model is not None and jax.process_count() > 1:
            from mujoco import mjx

            env._mjx_model = make_leaves_local(
                model, lambda device: mjx.put_model(env.mj_model, device=device, impl=model.impl),
                f"{self.name} mjx Model")


def make_playground(env_name: str, *, episode_length: int | None = None,
                    action_repeat: int | None = None,
                    config_overrides: Mapping[str, Any] | None = None,
                    observation_key: str = "state", policy_obs_key: str | None = None,
                    value_obs_key: str | None = None,
                    randomization: bool | str | Randomization | None = None,
                    reset_mode: str = "first_state") -> PlaygroundEnv:
    """Load ``mujoco_playground.registry.load(env_name)`` as a :class:`PlaygroundEnv`.

    Every argument is checked before the env is loaded (nothing is compiled or
    downloaded on bad input).

    Args:
      env_name: a name of Playground's registry (``"CartpoleBalance"``), without
        the ``playground/`` prefix.
      episode_length: time limit in control steps; ``None``: the env config's
        (after ``config_overrides``).
      action_repeat: control steps per env step; ``None``: the env config's.
      config_overrides: env config entries to replace, as Playground's
        ``registry.load(config_overrides=)`` takes them: flat dotted keys
        (``{"reward_config.scales.energy": -1e-3}``) or nested dicts. Each key
        must be in the env's default config. ``impl`` is set to
        :data:`_DEFAULT_IMPL` (``"jax"``) unless given here (``"warp"``: MuJoCo
        Warp, Playground's own default, for CUDA GPUs).
      observation_key: the entry of a dict observation the policy sees.
      policy_obs_key: Playground's name for ``observation_key`` (its training
        scripts' ``policy_obs_key``); ``None``: ``observation_key``.
      value_obs_key: the entry the critic sees (Playground's ``value_obs_key``,
        e.g. ``"privileged_state"``: an asymmetric actor-critic); ``None``: the
        policy's.
      randomization: domain randomisation, one model per env
        (:class:`~jaxtrainer.envs.BraxEnv`): ``True``, the env's own from
        Playground's registry (``registry.get_domain_randomizer(env_name)``);
        a registry name, that env's; a function (model, rng) -> (models,
        in_axes); ``None`` or ``False``: none.
      reset_mode: how an ended episode restarts
        (:data:`~jaxtrainer.envs.brax_env.RESET_MODES`).

    Raises:
      ImportError: MuJoCo Playground is not installed.
      ValueError: ``env_name`` is not in Playground's registry; a key of
        ``config_overrides`` that is not in the env's config (the message lists
        them) or a value its config rejects; ``impl`` not in :data:`IMPLS`;
        ``episode_length``/``action_repeat`` not a positive int; an unknown
        ``reset_mode``; ``policy_obs_key`` and ``observation_key`` both set and
        different; a ``randomization`` that is not a bool, a registry name or
        a function, or names an env without a domain randomizer.
      KeyError: ``policy_obs_key`` or ``value_obs_key`` not in the env's dict
        observation (the message lists its keys).
      FileNotFoundError: a locomotion or manipulation env whose assets (MuJoCo
        Menagerie, which Playground would clone from GitHub) are not on disk;
        raised before any download is attempted.
    """
    pg = _import_playground()
    if env_name not in pg.registry.ALL_ENVS:
        raise ValueError(f"playground/{env_name}: not in MuJoCo Playground's registry; "
                         f"its envs: {', '.join(pg.registry.ALL_ENVS)}")
    arguments.positive_int("episode_length", episode_length)
    arguments.positive_int("action_repeat", action_repeat)
    arguments.one_of("reset_mode", reset_mode, RESET_MODES)
    if policy_obs_key is not None:
        if observation_key not in ("state", policy_obs_key):
            raise ValueError(f"policy_obs_key={policy_obs_key!r} and observation_key="
                             f"{observation_key!r}: two names of one entry; set one of them")
        observation_key = policy_obs_key
    randomizer = _randomizer(pg, env_name, randomization)
    overrides = _checked_overrides(pg, env_name, config_overrides)
    missing = _menagerie_missing(env_name)
    if missing is not None:
        raise missing
    env = pg.registry.load(env_name, config_overrides=overrides)
    return PlaygroundEnv(env, episode_length, name=PLAYGROUND_PREFIX + env_name,
                         action_repeat=action_repeat, observation_key=observation_key,
                         value_obs_key=value_obs_key, randomization=randomizer,
                         reset_mode=reset_mode)


def _checked_overrides(pg: Any, env_name: str, config_overrides: Any) -> dict[str, Any]:
    """``config_overrides`` flattened (dotted keys), each key checked against the
    env's default config and ``impl`` set to :data:`_DEFAULT_IMPL` unless given
    (see :func:`make_playground`).

    Raises:
      ValueError: not a dict, a key not in the env's config (listing them), a
        value its config rejects, or ``impl`` not in :data:`IMPLS`.
    """
    if config_overrides is None:
        config_overrides = {}
    if not isinstance(config_overrides, Mapping):
        raise ValueError(f"config_overrides={config_overrides!r}: expected a dict of env "
                         "config entries, e.g. {'impl': 'jax'}")
    overrides = _flatten(config_overrides)
    config = pg.registry.get_default_config(env_name)
    known = _flatten(config.to_dict())
    for key in overrides:
        if key not in known:
            raise ValueError(f"config_overrides: {key!r} is not a config key of "
                             f"playground/{env_name}; its keys: {', '.join(sorted(known))}")
    if "impl" in known:
        overrides.setdefault("impl", _DEFAULT_IMPL)
        arguments.one_of("config_overrides['impl']", overrides["impl"], IMPLS)
    try:
        config.update_from_flattened_dict(overrides)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"playground/{env_name}: config_overrides={overrides!r}: {e}") from e
    return overrides


def _randomizer(pg: Any, env_name: str, randomization: Any) -> Callable[..., Any] | None:
    """The randomisation function ``randomization`` names for ``playground/<env_name>``
    (see :func:`make_playground`); ``None`` for none.

    Raises:
      ValueError: not a bool, a registry name or a function; or the env it names
        has no domain randomizer in Playground's registry.
    """
    if randomization is None or randomization is False:
        return None
    if callable(randomization):
        return randomization
    if randomization is True:
        source = env_name
    elif isinstance(randomization, str) and randomization in pg.registry.ALL_ENVS:
        source = randomization
    else:
        raise ValueError(f"playground/{env_name}: randomization={randomization!r}: expected "
                         "true (the env's own randomisation), the name of an env of Playground's "
                         "registry (that env's), a function (model, rng) -> (models, in_axes), "
                         "or false")
    found = pg.registry.get_domain_randomizer(source)
    if found is None:
        raise ValueError(f"playground/{env_name}: randomization={randomization!r}: Playground's "
                         f"registry has no domain randomizer for {source} (locomotion and "
                         "manipulation envs such as Go1JoystickFlatTerrain have one)")
    return found
