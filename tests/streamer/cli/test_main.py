"""``python -m streamer``: ``--version``, the closest command or option to a mistyped one, help
on every argument, and the README's exit codes for every command."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from converters.paths import PROJECT_ROOT
from streamer import __version__
from streamer.cli.main import build_parser
from streamer.foundation.paths import DEFAULT_MODEL_REPOSITORY
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ops.version_report import version_report


def _streamer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamer", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _parse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line argparse writes for ``argv``, which must be a usage error (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_version_names_the_package_the_triton_and_the_repository(
    triton_server: EmbeddedTriton,
) -> None:
    """The Triton version is the one the embedded server itself reports once it runs."""
    done = _streamer("--version")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    package, triton, repository = done.stdout.splitlines()
    assert package == f"lpr-streamer {__version__} (Python {platform.python_version()})"
    served = grpcclient.InferenceServerClient(triton_server.grpc_url).get_server_metadata()
    assert re.fullmatch(r"\d+\.\d+\.\d+", served.version), served.version
    wheel = importlib.metadata.version("nvidia-pytriton")
    assert (
        triton == f"Triton {served.version} (embedded: the tritonserver of nvidia-pytriton {wheel})"
    )
    info = json.loads((DEFAULT_MODEL_REPOSITORY / "build_info.json").read_text(encoding="utf-8"))
    height, width = info["input_hw"]
    assert repository == (
        f"model repository {DEFAULT_MODEL_REPOSITORY}: {info['target']} {info['runtime']} "
        f"{info.get('precision', 'fp32')}, detector {height}x{width}, built {info['built_at']}"
    )


def test_version_of_a_repository_not_built(tmp_path: Path) -> None:
    assert version_report(tmp_path).splitlines()[-1] == f"model repository {tmp_path}: not built"


def test_a_mistyped_command_is_answered_with_the_closest() -> None:
    done = _streamer("rnu")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "python -m streamer: error: unknown command 'rnu': did you mean 'run'?"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["recognize", "x.ts"], "unknown command 'recognize': did you mean 'recognise'?"),
        (
            ["deadletters", "lsit", "--config", "c.yaml"],
            "unknown command 'lsit': did you mean 'list'?",
        ),
        # Where argparse would have said "the following arguments are required: --config".
        (["run", "--confg", "c.yaml"], "unrecognized argument '--confg': did you mean '--config'?"),
        (
            ["run", "--config", "c.yaml", "--onse"],
            "unrecognized argument '--onse': did you mean '--once'?",
        ),
        # Where argparse would have said "invalid choice: 'DEBUG'" (it took DEBUG for a command).
        (
            ["--log-levl", "DEBUG", "run", "--config", "c.yaml"],
            "unrecognized argument '--log-levl': did you mean '--log-level'?",
        ),
        (
            ["recognise", "--evry=3", "x.ts"],
            "unrecognized argument '--evry': did you mean '--every'?",
        ),
        (
            ["erase", "--config", "c.yaml", "--plaet", "A123BC"],
            "unrecognized argument '--plaet': did you mean '--plate'?",
        ),
        (
            ["replay", "--config", "c.yaml", "--truht", "t.yaml"],
            "unrecognized argument '--truht': did you mean '--truth'?",
        ),
    ],
)
def test_a_mistyped_option_or_command_is_answered_with_the_closest(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _parse_error(argv, capsys).endswith(f"error: {error}")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["xyz"], "argument COMMAND: invalid choice: 'xyz' (choose from"),
        (["run", "--config", "c.yaml", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_nothing_close_keeps_what_argparse_says(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _parse_error(argv, capsys)
    assert error in line and "did you mean" not in line


def test_abbreviations_argparse_accepts_still_parse() -> None:
    args = build_parser().parse_args(["--log-l", "DEBUG", "run", "--conf", "c.yaml", "--on"])
    assert (args.command, args.config, args.once, args.log_level) == (
        "run",
        Path("c.yaml"),
        True,
        "DEBUG",
    )


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_command_and_argument_has_help() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) == 10  # python -m streamer, 7 commands, deadletters list and redrive
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                assert set(helps) == set(action.choices) and all(helps.values()), parser.prog
            elif not isinstance(action, argparse._HelpAction):
                where = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
                assert action.help and action.help != argparse.SUPPRESS, where
                assert len(action.help) > 10, f"{where}: {action.help!r} says little"


def test_the_readme_gives_the_exit_codes_of_every_command() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {re.match(r"\| `([\w ]+)`", row).group(1) for row in rows}  # type: ignore[union-attr]
    commands = set(next(a for a in build_parser()._actions if a.dest == "command").choices)
    assert documented == commands
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), row  # command, 0, 1, 2, 130
