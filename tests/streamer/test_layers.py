"""The packages of ``streamer/`` stand in layers: each imports only from the layers below it.

From the bottom: the foundation (no stage), the domain's types, the config schema, the stages
that feed one another (ingest, inference, tracking; delivery; the store and the pipeline), the
web view, the ops surface (health, metrics, reload), the composition root and the CLI.
Packages of one layer do not import each other, so no two packages can form a cycle and no
import has to hide inside a function to dodge one. Every import counts: at the top of a
module, inside a function, under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from streamer.foundation.paths import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "streamer"

#: Bottom first; a package may import from the layers before its own only.
LAYERS: list[set[str]] = [
    {"foundation"},
    {"domain"},
    {"config"},
    {"ingest", "inference", "tracking"},
    {"delivery"},
    {"store", "pipeline"},
    {"web"},
    {"ops"},
    {"app"},
    {"cli"},
    {"__main__"},
]
LAYER = {part: index for index, layer in enumerate(LAYERS) for part in layer}


def _part(path: Path) -> str:
    """The package (or top-level module) of ``streamer/`` a file belongs to."""
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _imported_parts(tree: ast.AST) -> list[tuple[int, str, str]]:
    """``(line, module as written, part of streamer/ it names)`` for every import of the
    service's own code (``from streamer import __version__`` names no part)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "streamer":  # from streamer import ops
                modules = [(f"streamer.{a.name}", f"streamer.{a.name}") for a in node.names]
            else:
                modules = [(node.module, node.module)]
        else:
            continue
        for written, module in modules:
            parts = module.split(".")
            if parts[0] == "streamer" and len(parts) > 1 and parts[1] in LAYER:
                found.append((node.lineno, written, parts[1]))
    return sorted(found)


def _upward_imports() -> list[str]:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _part(path)
        for line, module, part in _imported_parts(ast.parse(path.read_text(), str(path))):
            if part != own and LAYER[part] >= LAYER[own]:
                wrong.append(
                    f"{path.relative_to(PROJECT_ROOT)}:{line}: {own} (layer {LAYER[own]}) "
                    f"imports {module} (layer {LAYER[part]})"
                )
    return wrong


def test_every_package_has_a_layer() -> None:
    parts = {_part(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert parts - set(LAYER) == set(), "place the new package in LAYERS"


def test_no_import_runs_up_the_layers() -> None:
    assert _upward_imports() == []


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    """The walk sees imports wherever they are: in a function, under TYPE_CHECKING."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from streamer.domain.frames import Frame\n"
        "if TYPE_CHECKING:\n"
        "    from streamer.web.server import WebServer\n"
        "def later():\n"
        "    import streamer.pipeline.cameras\n"
        "from streamer import ops, __version__\n"
    )
    found = _imported_parts(ast.parse(source))
    assert [(line, part) for line, _, part in found] == [
        (2, "domain"),
        (4, "web"),
        (6, "pipeline"),
        (7, "ops"),
    ]
