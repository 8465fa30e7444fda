"""Reading a config file: bounded, strict YAML, ``${VAR}`` expanded, validated as :class:`Settings`.

The file is read up to ``MAX_CONFIG_BYTES`` and may expand to ``MAX_CONFIG_VALUES`` values (a
YAML alias bomb is refused before it is walked); a key repeated in one mapping is an error,
where PyYAML would keep the last. Every failure is a :class:`ConfigError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from streamer.config.base import type_name
from streamer.config.delivery import OutboxConfig
from streamer.config.errors import ConfigError, format_validation_error, key_path
from streamer.config.interpolate import interpolate
from streamer.config.settings import Settings

#: A config file larger than this is refused.
MAX_CONFIG_BYTES = 1024 * 1024
#: Values (mappings, lists, scalars) a config may expand to; YAML aliases can make a small
#: file expand exponentially ("billion laughs").
MAX_CONFIG_VALUES = 100_000


def load_config(path: Path | str, env: Mapping[str, str] | None = None) -> Settings:
    """Read, interpolate and validate a YAML config file.

    ``env`` supplies the ``${VAR}`` values (default: ``os.environ``). Relative
    paths in the file resolve against its folder. Raises :class:`ConfigError`.
    """
    path = Path(path)
    raw = _read_sections(path)
    data = _interpolated(raw, path, env)
    # An empty section (`web:`) means its defaults; an empty `cameras:` means none.
    for section in list(data):
        if data[section] is None and section in Settings.model_fields:
            if section == "cameras":
                data[section] = []
            else:
                del data[section]
    try:
        return Settings.model_validate(data, context={"base_dir": path.absolute().parent})
    except ValidationError as exc:
        raise format_validation_error(path, exc, data) from None


class _OutboxSection(BaseModel):
    """The ``outbox`` section alone, as :class:`Settings` declares it (same default)."""

    model_config = ConfigDict(extra="ignore")
    outbox: OutboxConfig = Settings.model_fields["outbox"]


def load_outbox_config(path: Path | str, env: Mapping[str, str] | None = None) -> OutboxConfig:
    """The ``outbox`` section of a config file, read as :func:`load_config` reads it, but with
    ``${VAR}`` expanded in that section only: reading the local outbox (``deadletters list``)
    needs none of the secrets the other sections take from the environment. The rest of
    the file is not validated. Raises :class:`ConfigError`.
    """
    path = Path(path)
    raw = _read_sections(path)
    section = raw.get("outbox")
    data = _interpolated({} if section is None else {"outbox": section}, path, env)
    try:
        return _OutboxSection.model_validate(
            data, context={"base_dir": path.absolute().parent}
        ).outbox
    except ValidationError as exc:
        raise format_validation_error(path, exc, data) from None


def _interpolated(raw: dict[str, Any], path: Path, env: Mapping[str, str] | None) -> dict[str, Any]:
    """``raw`` with ``${VAR}`` expanded; every reference that cannot be is a problem."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    data = interpolate(raw, os.environ if env is None else env, problems=problems)
    if problems:
        raise ConfigError(path, [(key_path(loc, raw), reason) for loc, reason in problems])
    return data  # type: ignore[no-any-return]


def _read_sections(path: Path) -> dict[str, Any]:
    """The file's top-level mapping, parsed (bounded, strict YAML), not yet interpolated."""
    try:
        with path.open("rb") as file:  # bounded: --config /dev/zero must not fill memory
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(path, [(None, f"larger than {MAX_CONFIG_BYTES // 1024} KiB")])
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(path, [(None, "config file not found")]) from None
    except IsADirectoryError:
        raise ConfigError(path, [(None, "is a directory, not a config file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, [(None, f"not UTF-8 text (byte {exc.start})")]) from None
    except OSError as exc:
        raise ConfigError(path, [(None, f"cannot read the file: {exc.strerror}")]) from None

    raw = parse_yaml(text, path)
    _check_size(raw, path)
    if raw is None:
        raise ConfigError(path, [(None, "the file is empty: it needs at least a 'cameras:' list")])
    if not isinstance(raw, dict):
        sections = ", ".join(Settings.model_fields)
        reason = f"the top level must be a mapping of sections ({sections}), got {type_name(raw)}"
        raise ConfigError(path, [(None, reason)])
    return raw


#: YAML 1.2's booleans: ``true`` and ``false`` only. PyYAML follows YAML 1.1, where ``yes``,
#: ``no``, ``on``, ``off``, ``y`` and ``n`` are booleans too (``country: no`` reads as false).
_BOOL_1_2 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects a key repeated in one mapping (PyYAML keeps the last) and
    reads only ``true``/``false`` as booleans (YAML 1.2: ``enabled: yes`` is the string
    ``yes``, which a boolean key then refuses)."""

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: SafeLoader reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_1_2, list("tTfF"))


def _check_size(raw: Any, path: Path) -> None:
    """Refuse a document that expands to more than ``MAX_CONFIG_VALUES`` values."""
    stack, count = [raw], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(
                path,
                [(None, f"expands to more than {MAX_CONFIG_VALUES} values (YAML aliases?)")],
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _variable_near(text: str, line: int, column: int) -> bool:
    """Whether a ``${`` stands just before ``column`` of ``line`` (0-based): in a flow
    collection, an unquoted ``${VAR}`` reads as the start of a mapping."""
    lines = text.splitlines()
    return line < len(lines) and "${" in lines[line][max(0, column - 2) : column + 2]


def parse_yaml(text: str, path: Path | str = "<config>") -> Any:
    """``yaml.safe_load`` that rejects duplicate keys; errors are :class:`ConfigError`
    with the line and column (the offending line itself is not quoted: it may hold a
    password)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        reason = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem and exc.context_mark:
            reason += (
                f" ({exc.context} started at line {exc.context_mark.line + 1}, "
                f"column {exc.context_mark.column + 1})"
            )
        if mark and _variable_near(text, mark.line, mark.column):
            reason += '; a ${VAR} inside [ ] or { } must be quoted: "${VAR}"'
        raise ConfigError(path, [(None, f"invalid YAML at {where}: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, [(None, f"invalid YAML: {exc}")]) from None
