"""The package's shape, checked on its source: the core never imports the recipes,
no module reaches into another's private names, and no function is too long to read."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "jaxtrainer"

NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}
"""``typing.NamedTuple``'s documented methods, underscored only so that they
cannot clash with field names (optax's states are NamedTuples)."""

ALLOWED = {
    ("jaxtrainer/runtime/_signals.py", "os._exit"):
        "exit_at_once: a failed rank, a finished recipe (its exit handlers already run) and a "
        "survivor whose main thread waits in the runtime for a dead process end at once, "
        "without waiting for XLA's threads (os._exit is the documented way)",
    ("jaxtrainer/distributed/_process.py", "from jax._src.distributed import global_state"):
        "JAX offers no public handle on the coordination service's client, which the peer "
        "watch's key-value beats need (orbax reads it the same way)",
    ("jaxtrainer/runtime/_signals.py", "atexit._run_exitfuncs"):
        "the interpreter's own exit handlers (loggers, orbax) run before that os._exit",
    ("jaxtrainer/envs/playground_env.py", "env._mjx_model"):
        "MuJoCo Playground offers no setter for the model it steps; with several "
        "processes each one must hold its own copy of it",
    ("jaxtrainer/envs/playground_env.py", "from mujoco_playground._src import mjx_env"):
        "where Playground clones MuJoCo Menagerie (MENAGERIE_PATH) is kept only there; "
        "reading it lets a missing asset clone be a clear error before anything runs",
}
"""Accesses to another module's underscore-prefixed names that stay, each with its
reason (at most 5)."""


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _own_names(tree: ast.AST) -> set[str]:
    """Underscore names a module defines: functions, classes, variables,
    arguments and the attributes its classes set on themselves (``self._x = ...``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within_allow_list(found: dict, allowed: dict, describe) -> None:
    """Every key of ``found`` is in ``allowed`` (else the message lists them, each as
    ``describe(*key)`` says), and every entry of ``allowed`` is still needed."""
    unexplained = sorted(k for k in found if k not in allowed)
    assert unexplained == [], "\n".join(describe(*k) for k in unexplained)
    stale = sorted(set(allowed) - set(found))
    assert not stale, f"allow-list entries no longer needed: {stale}"


def _package_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of ``jaxtrainer`` itself: its private
    modules (``jaxtrainer.trainer._fit_loop``) are private to the package, not to their
    room, and the package's modules import them."""
    if not dotted.startswith("jaxtrainer."):
        return False
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _private_accesses(path: Path) -> list[tuple[str, int, str]]:
    """``(file, line, expression)`` for every use of another module's private name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _own_names(tree)
    rel = path.relative_to(SRC).as_posix() if path.is_relative_to(SRC) else path.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            taken = [a.name for a in node.names if _private(a.name)
                     and not _package_module(f"{module}.{a.name}")]
            if (any(_private(part) for part in module.split(".")) and not _package_module(module)) \
                    or taken:
                names = taken or [a.name for a in node.names]
                found.append((rel, node.lineno, f"from {module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(_private(part) for part in alias.name.split(".")) \
                        and not _package_module(alias.name):
                    found.append((rel, node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            if node.attr in own or node.attr in NAMEDTUPLE_API:
                continue
            found.append((rel, node.lineno, ast.unparse(node)))
    return found


def test_no_module_uses_another_modules_private_names():
    assert len(ALLOWED) <= 5
    found = [f for path in _modules() for f in _private_accesses(path)]
    unexplained = [f for f in found if (f[0], f[2]) not in ALLOWED]
    assert unexplained == [], "\n".join(f"{f}:{line}: {expr}" for f, line, expr in unexplained)
    stale = set(ALLOWED) - {(f[0], f[2]) for f in found}
    assert not stale, f"allow-list entries no longer needed: {sorted(stale)}"


def test_the_private_name_check_sees_what_it_must(tmp_path):
    """The check itself: an import of a private name, a private module, and an
    attribute of another object are found; self's and a NamedTuple's are not."""
    source = ("from jaxtrainer.envs.brax_env import _pack\n"
              "from jaxtrainer import _hidden\n"
              "x = other._secret + self._mine + state._replace(a=1)\n")
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert [expr for _, _, expr in _private_accesses(path)] == ["from jaxtrainer.envs.brax_env import _pack",
                          "from jaxtrainer import _hidden", "other._secret"]


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_trainer_class_is_at_most_400_lines():
    """The Trainer is a facade: the hook order, counters and resume; the pieces
    it calls (fit_setup, fit_run, fit_loop, planner, programs) live beside it."""
    tree = ast.parse((PACKAGE / "trainer" / "trainer.py").read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    assert trainer.end_lineno - trainer.lineno + 1 <= 400


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_core_never_imports_the_recipes():
    """Every module of the package but the recipes, the commands (which run
    them) and ``__main__`` (the command itself) is imported in a fresh
    interpreter; none of them brings jaxtrainer.recipes in (saved runs reach the
    recipes' builder through an entry point, at call time)."""
    modules = [_dotted(p) for p in _modules()
               if not p.relative_to(PACKAGE).as_posix().startswith(("recipes/", "commands/"))
               and p.name != "__main__.py"]
    script = ("import importlib, sys\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n"
              "bad = sorted(m for m in sys.modules if m == 'jaxtrainer.recipes' "
              "or m.startswith('jaxtrainer.recipes.'))\n"
              "print('RECIPES', bad)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RECIPES []" in proc.stdout, proc.stdout
    assert len(modules) > 60


@pytest.mark.slow
def test_every_name_a_run_writes_is_a_literal_in_one_module_only():
    """``config.yaml``, ``checkpoints``, ``metrics.csv``, ... are spelled once, in
    :mod:`jaxtrainer.rundir.run_layout`; every writer and reader takes them from there."""
    from jaxtrainer.rundir import run_layout

    names = {v for k, v in vars(run_layout).items() if k.isupper() and isinstance(v, str)}
    assert {"config.yaml", "module.yaml", "checkpoints", "metrics.csv", "hparams.csv", "sweep_members.csv",
            "tensorboard", "search.csv", ".lock"} <= names
    found = []
    for path in _modules():
        if path.name == "run_layout.py":
            continue
        tree = ast.parse(path.read_text())
        keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}
        # a package imported or checked by name (import_optional("wandb", ...)) is not a run's file
        keys |= {id(arg) for c in ast.walk(tree) if isinstance(c, ast.Call)
                 and ast.unparse(c.func).endswith(("import_optional", "check_installed"))
                 for arg in c.args[:2]}
        for node in ast.walk(tree):  # a dict key is a name of its own (logger.tensorboard)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in keys:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert found == []


CORE = ("trainer", "callbacks", "checkpoint", "strategies", "runtime", "distributed",
        "population")
OUTSIDE_THE_CORE = ("population", "compat", "recipes", "algorithms")


def _room(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module_level_imports(path: Path) -> set[str]:
    """The ``jaxtrainer`` modules ``path`` imports at its top level (not inside
    functions or ``if TYPE_CHECKING:``), with ``from a import b`` naming ``a.b``
    when ``b`` is a module."""
    known = {_dotted(p) for p in _modules()}
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names} & known
    return {m for m in found if m.startswith("jaxtrainer.")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more nodes (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.slow
def test_the_core_has_no_import_cycle_and_imports_nothing_outside_it():
    """No cycle among trainer, callbacks, checkpoint, strategies, distributed and
    population (as folders), none among the recipes' modules, and importing the
    core loads no population, EvoRL compatibility, recipe or algorithm module."""
    rooms: dict[str, set[str]] = {}
    recipes: dict[str, set[str]] = {}
    for path in _modules():
        me = _dotted(path)
        for other in _module_level_imports(path):
            a, b = _room(me), _room(other)
            if a in CORE and b in CORE and a != b:
                rooms.setdefault(a, set()).add(b)
            if a == b == "recipes" and me != other:
                recipes.setdefault(me, set()).add(other)
    assert _cycles(rooms) == []
    assert _cycles(recipes) == []
    code = ("import sys\n"
            "import jaxtrainer.trainer, jaxtrainer.trainer._fit_loop, jaxtrainer.callbacks, "
            "jaxtrainer.checkpoint, jaxtrainer.strategies, jaxtrainer.distributed\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] == 'jaxtrainer' and "
            f"len(m.split('.')) > 1 and m.split('.')[1] in {OUTSIDE_THE_CORE!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"


FLOORS = (
    ("commands", "__main__"),
    ("recipes",),
    ("population", "algorithms", "compat", "inference"),
    ("trainer",),
    ("callbacks", "loggers"),
    ("checkpoint", "strategies"),
    ("envs",),
    ("distributed",),
    ("runtime", "rundir"),
    ("",),  # the ground floor
)
"""The package's floors, top to bottom: a module imports its own floor and the
floors below it, at module level and inside functions (DESIGN.md, "Layout");
``compat`` sits beside ``population``, since nothing below it imports it."""

GROUND_FLOOR = ("module", "metrics", "policy", "_arguments", "_formatting", "aliases")
"""The root modules: user contracts, values and the package's own helpers."""

UPWARD: dict[tuple[str, str], str] = {}
"""Imports of a higher floor that stay, ``(importer, imported): reason``."""


def _floor(dotted: str) -> int:
    parts = dotted.split(".")
    room = parts[1] if len(parts) > 1 else ""
    if len(parts) == 2 and not (PACKAGE / room).is_dir():  # a root module
        assert room in GROUND_FLOOR or room == "__main__", f"{dotted}: a root module off the ground floor"
        room = "" if room in GROUND_FLOOR else "__main__"
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def _imports(path: Path) -> set[str]:
    """The ``jaxtrainer`` modules ``path`` imports, at module level or inside a
    function (not under ``if TYPE_CHECKING:``); relative imports resolved and
    ``from a import b`` naming ``a.b`` when ``b`` is a module."""
    known = {_dotted(p) for p in _modules()}
    tree = ast.parse(path.read_text())
    typing_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for sub in ast.walk(node)}
    me = _dotted(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            modules = {f"{module}.{a.name}" for a in node.names} & known
            found |= modules if len(modules) == len(node.names) else modules | {module}
    return {m for m in found if m.startswith("jaxtrainer.")}


def _upward_imports() -> dict[tuple[str, str], str]:
    found = {}
    for path in _modules():
        me = _dotted(path)
        for other in _imports(path):
            if other != "jaxtrainer" and _floor(other) < _floor(me):
                found[(me, other)] = f"{FLOORS[_floor(me)][0] or 'ground'} -> {FLOORS[_floor(other)][0]}"
    return found


def test_no_floor_imports_a_higher_one():
    """commands -> recipes -> population/algorithms/compat -> trainer -> callbacks/loggers
    -> checkpoint/strategies -> envs -> distributed -> runtime/rundir -> the ground floor:
    a module imports only its own floor and those below, at module level or inside a
    function (``UPWARD`` lists the exceptions that stay, each with its reason)."""
    found = _upward_imports()
    _within_allow_list(found, UPWARD, lambda a, b: f"{a} imports {b} ({found[(a, b)]})")


def test_the_package_root_holds_the_ground_floor_only():
    """At most 8 modules at the root (the package's face and ``__main__`` counted);
    everything else lives in a room of its floor."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 8, root
    assert {p[:-3] for p in root} <= {*GROUND_FLOOR, "__init__", "__main__"}


def test_the_floor_check_sees_what_it_must():
    assert _floor("jaxtrainer.commands._cli") < _floor("jaxtrainer.recipes.config") \
        < _floor("jaxtrainer.population.pbt") < _floor("jaxtrainer.trainer") \
        < _floor("jaxtrainer.callbacks.base") < _floor("jaxtrainer.checkpoint._files") \
        < _floor("jaxtrainer.envs.gymnax_env") < _floor("jaxtrainer.distributed._process") \
        < _floor("jaxtrainer.runtime._signals") < _floor("jaxtrainer.module")
    assert _floor("jaxtrainer.trainer._fit_loop") == _floor("jaxtrainer.trainer")
    assert _floor("jaxtrainer.algorithms") == _floor("jaxtrainer.population.pbt")


TRAINER_WRITES: dict[tuple[str, str], str] = {}
"""Trainer attributes written outside ``trainer/``, ``(file, attribute): reason``: none.
Callbacks stop a fit with ``trainer.request_stop``, change the state with
``trainer.update_state``, add and remove callbacks with ``add_callback`` and
``remove_callback``; a search's rounds end on log boundaries by its ``Budget``."""


def _is_trainer(node: ast.AST) -> bool:
    """``trainer``, ``population_trainer``, ``self.trainer``, ``self._trainer``."""
    if isinstance(node, ast.Name):
        return "trainer" in node.id.lower()
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id == "self" and "trainer" in node.attr.lower()


def _trainer_writes(path: Path) -> set[tuple[int, str]]:
    """``(line, attribute)`` for each Trainer attribute ``path`` assigns:
    ``trainer.x = ...``, ``trainer.x += ...``, ``trainer.x[...] = ...``,
    ``setattr(trainer, "x", ...)``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Subscript):
                    sub = sub.value
                if isinstance(sub, ast.Attribute) and _is_trainer(sub.value):
                    found.add((node.lineno, sub.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and node.args and _is_trainer(node.args[0]):
            name = node.args[1].value if isinstance(node.args[1], ast.Constant) else "?"
            found.add((node.lineno, name))
    return found


def test_no_module_outside_trainer_assigns_a_trainer_attribute():
    """The fit's state has one owner, ``trainer/``: callbacks, commands, recipes and
    populations read it and stop a fit through ``trainer.request_stop(reason)``."""
    found = {}
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("jaxtrainer/trainer/"):
            continue
        for line, attr in _trainer_writes(path):
            found.setdefault((rel, attr), []).append(line)
    _within_allow_list(found, TRAINER_WRITES, lambda f, a: f"{f}:{found[(f, a)]}: trainer.{a} = ...")


def test_the_trainer_write_check_sees_what_it_must(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("trainer.should_stop = True\nself.trainer.stop_reason = 'x'\n"
                    "trainer.callbacks[:] = []\nsetattr(trainer, 'state', 1)\n"
                    "cfg.trainer.ckpt_path = 'last'\ntrainer.request_stop('x')\n")
    assert sorted(_trainer_writes(path)) == [(1, "should_stop"), (2, "stop_reason"),
                                             (3, "callbacks"), (4, "state")]


def test_the_architecture_drawing_is_the_codes():
    """``docs/guides/architecture.md`` shows the rooms and arrows the code has now."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("drawing", ROOT / "docs" / "architecture_drawing.py")
    drawing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drawing)
    assert drawing.in_guide() == drawing.drawing(), "run: python docs/architecture_drawing.py --write"


def test_the_tests_mirror_the_package():
    """Each test file sits in the folder of the package room it tests
    (``tests/trainer/`` for ``src/jaxtrainer/trainer/``, ...); the root holds the ground
    floor's and the package's own tests, ``tests/benchmarks/`` those of
    ``benchmarks/``, and ``tests/_support/`` the helpers."""
    tests = ROOT / "tests"
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    misplaced = [str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
                 if "_support" not in p.relative_to(tests).parts
                 and p.parent != tests and p.parent.relative_to(tests).parts[0] not in rooms | {"benchmarks"}]
    assert misplaced == []
    helpers = [p.name for p in tests.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"]
    assert helpers == [], "helpers belong in tests/_support/"
    assert len(list(tests.rglob("test_*.py"))) > 100


MODULE_CAPABILITIES = frozenset({
    "budget_per_member", "budget_share", "member_state", "member_module", "population_module",
    "module", "initial_hyperparams", "env_steps_per_generation", "configure_population",
    "evaluation_step", "validate", "has_policy", "policy", "greedy_policy", "policy_params",
    "sample_policy", "stochastic_policy", "recurrent", "initial_carry", "headline_metric",
    "step_function_name", "current_fitness", "describe_member", "TUNABLE", "population_size",
    "num_envs", "host", "env", "_init_arguments",
})
"""What a module may offer beyond ``training_step``: a probe for one of these names
is a capability probe whatever its receiver (a config's ``eval_episodes`` is not)."""

MODULE_PROBES = {
    ("jaxtrainer/rundir/module_record.py", "_init_arguments"):
        "the constructor arguments Module.__new__ keeps on the instance; a module of "
        "another base (a PopulationModule) has none, and its run is not recorded",
}
"""``getattr``/``hasattr`` probes on a module that stay, ``(file, attribute): reason``."""


def _looks_like_a_module(node: ast.AST, module_classes: set[str]) -> bool:
    """The receiver heuristic: ``module``, ``pm``, ``*_module``, ``self.module``,
    ``self.*_module``, and ``self`` inside a class whose bases name a module
    (``Module``, ``*Module``, ``MemberPopulation``, ``ParamsPolicy``)."""
    if isinstance(node, ast.Name):
        return node.id in {"module", "pm"} or node.id.endswith("_module") \
            or (node.id == "self" and bool(module_classes))
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id == "self" and (node.attr == "module" or node.attr.endswith("_module"))


def _module_probes(path: Path) -> set[tuple[int, str]]:
    """``(line, attribute)`` for each ``getattr(x, "name", ...)`` / ``hasattr(x, "name")``
    whose receiver looks like a module or whose name is a module capability."""
    tree = ast.parse(path.read_text())
    found = set()

    def visit(node: ast.AST, classes: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
            module_like = {b for b in bases if b.endswith("Module") or b in
                           {"MemberPopulation", "ParamsPolicy", "ActorCriticBase"}}
            classes = module_like | ({node.name} if module_like or node.name.endswith("Module")
                                     else set())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value
            if name in MODULE_CAPABILITIES or _looks_like_a_module(node.args[0], classes):
                found.add((node.lineno, name))
        for child in ast.iter_child_nodes(node):
            visit(child, classes)

    visit(tree, set())
    return found


def test_no_capability_probe_on_a_module():
    """What a module offers is declared (``Module``'s attributes and hooks with their
    defaults) or a ``typing.Protocol`` checked with ``isinstance``
    (:mod:`jaxtrainer.module`), never probed by name with ``getattr``/``hasattr``."""
    assert len(MODULE_PROBES) <= 3
    found = {}
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        for line, attr in _module_probes(path):
            found.setdefault((rel, attr), []).append(line)
    _within_allow_list(found, MODULE_PROBES, lambda f, a: f"{f}:{found[(f, a)]}: probe for {a!r}")


def test_the_module_probe_check_sees_what_it_must(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("a = getattr(module, 'budget_per_member', False)\n"
                    "b = hasattr(self.population_module, 'anything')\n"
                    "c = getattr(trainer_module, 'x', None)\n"
                    "d = callable(getattr(thing, 'member_state', None))\n"
                    "class M(Module):\n"
                    "    def f(self):\n"
                    "        return getattr(self, 'whatever', 0)\n"
                    "e = getattr(cfg, 'dtype', None)\n"
                    "class Plain:\n"
                    "    def f(self):\n"
                    "        return getattr(self, 'whatever', 0)\n")
    assert sorted(_module_probes(path)) == [(1, "budget_per_member"), (2, "anything"), (3, "x"),
                                           (4, "member_state"), (7, "whatever")]


def test_the_public_api_is_the_reviewed_list():
    """Every public name (a name without a leading underscore in a module whose path
    has none) with its signature is a line of ``docs/reference/api.txt``, and every line
    is one: adding, removing or changing a public name is a reviewed change of that
    file (``python docs/api_list.py --write``)."""
    spec = importlib.util.spec_from_file_location("api_list", ROOT / "docs" / "api_list.py")
    api_list = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api_list)
    listed = api_list.LIST.read_text().splitlines()
    listed = [line for line in listed if line and not line.startswith("#")]
    code = api_list.api()
    assert not (new := sorted(set(code) - set(listed))), (
        f"public names not in docs/reference/api.txt (make them private, or review and run "
        f"python docs/api_list.py --write): {new[:20]}")
    assert not (gone := sorted(set(listed) - set(code))), (
        f"docs/reference/api.txt lists what the code no longer has: {gone[:20]}")


def test_the_api_list_sees_a_new_public_name(tmp_path, monkeypatch):
    """A public function planted in a public module is a line the list must hold; the
    same name with a leading underscore, or in a private module, is none."""
    spec = importlib.util.spec_from_file_location("api_list", ROOT / "docs" / "api_list.py")
    api_list = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api_list)
    package = tmp_path / "jaxtrainer"
    (package / "room").mkdir(parents=True)
    (package / "aliases.py").write_text("ALIASES = {}\n")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "piece.py").write_text("def helper(x, *, y=1): ...\ndef _own(): ...\n"
                                               "class Thing:\n    def __init__(self, a): ...\n"
                                               "    def go(self, b): ...\n")
    (package / "room" / "_inner.py").write_text("def hidden(): ...\n")
    monkeypatch.setattr(api_list, "PACKAGE", package)
    assert api_list.api() == ["jaxtrainer.aliases.ALIASES", "class jaxtrainer.room.piece.Thing(a)",
                              "  jaxtrainer.room.piece.Thing.go(b)",
                              "def jaxtrainer.room.piece.helper(x, *, y=1)"]
