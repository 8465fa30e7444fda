"""The commands the documents show, checked against the code they call, so that they cannot
drift: every ``python -m streamer|converters|bench...`` and ``python bench/*.py`` line of a
``sh`` block is parsed by that program's own argument parser (it stops right after parsing:
nothing is run), every ``make`` target exists, every file a command names is in the tree.

What they print is checked where it is produced: the demo's output block of the README
(``<!-- doc-check: demo-output -->``) by the demo's test in tests/streamer/test_app.py.
Commands of other programs (docker, kubectl, curl, sudo, mosquitto_sub, py-spy) are left to
their own documentation.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from converters.paths import PROJECT_ROOT
from tests.docs import DOCUMENTS, Command, blocks, shell_commands

#: Placeholders the documents write for a value of the reader's: a value of the right type.
PLACEHOLDERS = {"N": "2", "ID": "0b7e5a59-3f4c-4a8e-9d63-5a3f0f3a2b11"}
#: Files the documents name as the reader's own (a site's config), not the project's.
READERS_FILES = {"configs/site.yaml"}
_PYTHON = re.compile(r"^(\.venv/bin/)?python3?$")


def _commands() -> list[Command]:
    return [
        command
        for path in DOCUMENTS
        for block in blocks(path)
        if block.language in ("sh", "bash", "console")
        for command in shell_commands(block)
    ]


def _python_programs() -> list[Command]:
    return [
        c
        for c in _commands()
        if _PYTHON.match(c.words[0])
        and len(c.words) > 1
        and (
            (c.words[1] == "-m" and c.words[2].split(".")[0] in ("streamer", "converters", "bench"))
            or c.words[1].startswith("bench/")
        )
    ]


def _arguments(words: list[str]) -> list[str]:
    """The words as a reader fills them in: ``[--target crm]`` taken, ``...`` dropped, the
    placeholders given values."""
    out = []
    for word in words:
        word = word.strip("[]")
        if word in ("", "...", "|"):
            continue
        out.append(PLACEHOLDERS.get(word, word))
    return out


class _Parsed(BaseException):
    """Raised in place of running the program once its arguments parsed."""


@contextlib.contextmanager
def _stop_after_parsing() -> Iterator[list[argparse.Namespace]]:
    parsed: list[argparse.Namespace] = []
    original = argparse.ArgumentParser.parse_args

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        parsed.append(original(self, *args, **kwargs))
        raise _Parsed

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    try:
        yield parsed
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


def test_the_documents_show_the_programs_commands() -> None:
    programs = _python_programs()
    shown = {" ".join(c.words[1:3]) for c in programs}
    # What a reader is sure to look for (the parsing below would pass on no commands at all).
    for expected in ("-m streamer", "-m converters", "-m bench"):
        assert expected in shown, shown


# runpy warns that bench.X was imported (by an earlier case) before it runs it as __main__.
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
@pytest.mark.parametrize("command", _python_programs(), ids=lambda c: c.where)
def test_command_parses(command: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    words = _arguments(command.words[1:])
    if words[0] == "-m":
        target, argv, run = words[1], words[2:], runpy.run_module
        source = Path(__import__(target, fromlist=["_"]).__file__ or "")
        if source.name == "__init__.py":
            source = source.with_name("__main__.py")
    else:
        target, argv, run = str(PROJECT_ROOT / words[0]), words[1:], runpy.run_path
        source = Path(target)
    assert source.is_file(), f"{command.where}: {source} does not exist"
    # Only a program that parses its arguments may be started here (it stops there).
    text = source.read_text(encoding="utf-8")
    assert "parse_args" in text or "main(" in text, f"{command.where}: {source} has no parser"
    monkeypatch.chdir(PROJECT_ROOT)
    monkeypatch.setattr(sys, "argv", [target, *argv])
    stderr = io.StringIO()
    with _stop_after_parsing() as parsed, contextlib.redirect_stderr(stderr):
        try:
            run(target, run_name="__main__")
        except _Parsed:
            pass
        except SystemExit as exc:
            pytest.fail(
                f"{command.where}: `{' '.join(command.words)}`: exit {exc.code}: "
                f"{stderr.getvalue().strip()}"
            )
    assert parsed, f"{command.where}: the program ended without parsing its arguments"


def test_make_targets_exist() -> None:
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.MULTILINE))
    for command in _commands():
        if command.words[0] == "make":
            for target in (w for w in command.words[1:] if "=" not in w):
                assert target in targets, f"{command.where}: make {target}: no such target"


def test_project_files_named_by_commands_exist() -> None:
    """A path a command passes (``configs/demo.yaml``, ``bench/viewers.py``) is in the tree:
    only those under the project's own folders that the command reads, not its outputs."""
    folders = ("configs/", "bench/", "deploy/", "docker/", "converters/", "streamer/")
    for command in _commands():
        words = command.words
        written = {words[i + 1] for i in range(len(words) - 1) if words[i] in (">", ">>")}
        for word in words[1:]:
            if word in written:
                continue
            word = word.split("=", 1)[-1]
            if word in READERS_FILES or "*" in word or word.endswith("/"):
                continue
            if word.startswith(folders):
                assert (PROJECT_ROOT / word).exists(), f"{command.where}: {word} does not exist"
