"""Draws the package's rooms and floors from the code, as a Mermaid flowchart.

Every folder of ``src/jaxtrainer`` is a room (the root modules together are the
ground floor), every import between two rooms an arrow (at module level or inside a
function; ``if TYPE_CHECKING:`` imports left out), and the rooms stand on the floors
``tests/test_package_shape.py`` holds the code to. An arrow that runs up a floor is
dashed (the shape test lists each with its reason). ``docs/guides/architecture.md``
holds the output between its ``drawing`` markers; a test checks it is current::

    python docs/architecture_drawing.py            # print the drawing
    python docs/architecture_drawing.py --write    # rewrite it in the guide
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "architecture.md"
BEGIN, END = "<!-- drawing: begin -->", "<!-- drawing: end -->"


def _shape():
    spec = importlib.util.spec_from_file_location("package_shape", ROOT / "tests" / "test_package_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _room(dotted: str) -> str:
    """A module's room: its folder; ``commands`` for ``__main__`` (the command), the
    ground floor for the other root modules."""
    parts = dotted.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (ROOT / "src" / "jaxtrainer" / parts[1]).is_dir()):
        return parts[1]
    return "commands" if parts[-1] == "__main__" else "ground"


def arrows() -> dict[tuple[str, str], int]:
    """``{(room, room it imports): number of importing modules}``."""
    shape = _shape()
    found: dict[tuple[str, str], set[str]] = {}
    for path in shape._modules():
        me = shape._dotted(path)
        for other in shape._imports(path):
            if other == "jaxtrainer":
                continue
            a, b = _room(me), _room(other)
            if a != b:
                found.setdefault((a, b), set()).add(me)
    return {k: len(v) for k, v in sorted(found.items())}


def drawing() -> str:
    shape = _shape()
    floors = [[r if r else "ground" for r in rooms if r != "__main__"] for rooms in shape.FLOORS]
    floor_of = {room: i for i, rooms in enumerate(floors) for room in rooms}
    lines = ["```mermaid", "flowchart TB"]
    for i, rooms in enumerate(floors):
        lines.append(f'  subgraph F{i}["floor {len(floors) - i}"]')
        lines += [f'    {r}["{r}/"]' if r != "ground" else '    ground["module, metrics, policy, arguments"]'
                  for r in rooms]
        lines.append("  end")
    for (a, b), n in arrows().items():
        up = floor_of[b] < floor_of[a]
        lines.append(f"  {a} {'-.->' if up else '-->'}|{n}| {b}")
    lines.append("```")
    return "\n".join(lines)


def in_guide() -> str:
    text = GUIDE.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        text = GUIDE.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        GUIDE.write_text(text[:start] + "\n" + drawing() + "\n" + text[end:])
    else:
        print(drawing())
