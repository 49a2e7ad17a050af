"""A stand-in for MuJoCo Menagerie's Unitree Go1 assets, for machines without internet.

MuJoCo Playground clones Menagerie from GitHub (554 MB) the first time it loads a
robot, into ``<mujoco_playground>/external_deps/mujoco_menagerie``. Its Go1 tasks read
only Go1's five visual meshes from there (``unitree_go1/assets/<name>.stl``; the XML is
Playground's own). The stand-in is one small tetrahedron for each: those geoms collide
with nothing (``contype=0 conaffinity=0``) and every body of the model has an explicit
``<inertial>``, so the dynamics are the real robot's; only pictures differ.

Used by ``playground.py --env Go1...`` (both sides of the row) and by the tests.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import struct

MESHES = ("trunk", "hip", "thigh_mirror", "calf", "thigh")
"""The meshes Playground's Go1 XML names (``<name>.stl``)."""


def tetrahedron_stl() -> bytes:
    """A binary STL of a 1 cm tetrahedron."""
    v = ((0, 0, 0), (0.01, 0, 0), (0, 0.01, 0), (0, 0, 0.01))
    faces = ((0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3))
    body = b"".join(struct.pack("<3f", 0, 0, 0) + b"".join(struct.pack("<3f", *v[i]) for i in f)
                    + b"\0\0" for f in faces)
    return b"\0" * 80 + struct.pack("<I", len(faces)) + body


def write(menagerie: pathlib.Path) -> pathlib.Path:
    """Write the stand-in meshes under ``menagerie/unitree_go1/assets``, leaving any mesh
    already there (a real clone's) as it is; returns ``menagerie``."""
    assets = pathlib.Path(menagerie) / "unitree_go1" / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    for name in MESHES:
        path = assets / f"{name}.stl"
        if not path.exists():
            path.write_bytes(tetrahedron_stl())
    return pathlib.Path(menagerie)


def provide(pythonpath: str | None = None) -> pathlib.Path:
    """The stand-in written where the ``mujoco_playground`` a program with ``PYTHONPATH=
    pythonpath`` imports looks for Menagerie (the first entry of ``pythonpath`` holding
    the package, else this interpreter's); returns that Menagerie directory.

    Raises:
      ModuleNotFoundError: no ``mujoco_playground`` on ``pythonpath`` nor here.
    """
    for entry in (pythonpath or "").split(os.pathsep):
        if entry and (pathlib.Path(entry) / "mujoco_playground" / "__init__.py").is_file():
            package = pathlib.Path(entry) / "mujoco_playground"
            break
    else:
        spec = importlib.util.find_spec("mujoco_playground")
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(f"no mujoco_playground on PYTHONPATH={pythonpath!r} nor "
                                      "in this interpreter: pip install playground")
        package = pathlib.Path(spec.origin).parent
    return write(package / "external_deps" / "mujoco_menagerie")
