"""``${VAR}`` and ``${VAR:-default}`` in the string values of a parsed config.

``$${`` is a literal ``${``; keys are left alone, and substituted values are not expanded
again. A reference that cannot be expanded is a problem reported with its key's location.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from streamer.foundation.redact import redact_text

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_VAR_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$", re.DOTALL)


def interpolate(
    node: Any,
    env: Mapping[str, str],
    loc: tuple[Any, ...] = (),
    problems: list[tuple[tuple[Any, ...], str]] | None = None,
) -> Any:
    """A copy of a parsed YAML tree with ``${VAR}`` and ``${VAR:-default}`` expanded in
    every string value (keys are left alone); ``$${`` gives a literal ``${``.

    Problems (unset variable without default, malformed reference) are appended to
    ``problems`` as ``(key location, reason)``; without a list the first raises ValueError.
    """
    collected: list[tuple[tuple[Any, ...], str]] = [] if problems is None else problems
    result = _interpolate(node, env, loc, collected, set())
    if problems is None and collected:
        raise ValueError(collected[0][1])
    return result


def _interpolate(
    node: Any,
    env: Mapping[str, str],
    loc: tuple[Any, ...],
    problems: list[tuple[tuple[Any, ...], str]],
    active: set[int],
) -> Any:
    if isinstance(node, str):
        return _interpolate_str(node, env, loc, problems)
    if not isinstance(node, dict | list):
        return node
    if id(node) in active:
        problems.append((loc, "recursive YAML alias"))
        return None
    active.add(id(node))
    try:
        if isinstance(node, dict):
            return {k: _interpolate(v, env, (*loc, k), problems, active) for k, v in node.items()}
        return [_interpolate(v, env, (*loc, i), problems, active) for i, v in enumerate(node)]
    finally:
        active.discard(id(node))


def _interpolate_str(
    text: str,
    env: Mapping[str, str],
    loc: tuple[Any, ...],
    problems: list[tuple[tuple[Any, ...], str]],
) -> str:
    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "$${":
            return "${"
        body = match.group(1)
        ref = _VAR_NAME.match(body) if body is not None else None
        if ref is None:
            shown = whole if body is not None else "${"
            problems.append(
                (
                    loc,
                    f"malformed reference {redact_text(shown)!r}: write ${{NAME}} or "
                    "${NAME:-default} (NAME of letters, digits and _), or $${ for a literal ${",
                )
            )
            return whole
        name, default = ref.group(1), ref.group(2)
        value = env.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        problems.append(
            (
                loc,
                f"environment variable {name} is not set: set it, or give a default with "
                f"${{{name}:-value}}",
            )
        )
        return whole

    return _REFERENCE.sub(replace, text)
