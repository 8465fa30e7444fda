"""The project's Markdown documents, read as a reader copies from them: fenced code blocks,
the shell commands in them, and the blocks marked for a check (``<!-- doc-check: NAME -->``
on the line before a block)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from converters.paths import PROJECT_ROOT

#: Every document a user reads commands from.
DOCUMENTS = (
    PROJECT_ROOT / "README.md",
    PROJECT_ROOT / "model_repository" / "README.md",
    *sorted((PROJECT_ROOT / "docs").glob("*.md")),
)
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_MARK = re.compile(r"<!--\s*doc-check:\s*([\w-]+)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    mark: str | None  # the doc-check mark on the line before, if any

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(PROJECT_ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    block: Block
    line: int
    words: list[str]

    @property
    def where(self) -> str:
        return f"{self.block.path.relative_to(PROJECT_ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(
            Block(path, line, match.group(1), match.group(2), mark.group(1) if mark else None)
        )
    return found


def marked(path: Path, mark: str) -> Block:
    """The one block of ``path`` marked ``<!-- doc-check: mark -->``."""
    found = [b for b in blocks(path) if b.mark == mark]
    assert len(found) == 1, f"{path}: {len(found)} blocks marked doc-check: {mark}"
    return found[0]


def shell_commands(block: Block) -> list[Command]:
    """The commands of a ``sh`` block: continuation lines joined, comments dropped; a
    here-document's body is skipped."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    i, heredoc_end = 0, None
    while i < len(lines):
        start, text = i, lines[i]
        i += 1
        if heredoc_end is not None:
            if text.strip() == heredoc_end:
                heredoc_end = None
            continue
        while text.endswith("\\") and i < len(lines):
            text = text[:-1] + " " + lines[i]
            i += 1
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)", text)
        if heredoc:
            heredoc_end = heredoc.group(1)
        words = shlex.split(text, comments=True)
        if words:
            commands.append(Command(block, block.line + 1 + start, words))
    return commands
