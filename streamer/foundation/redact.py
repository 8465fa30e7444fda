"""The one redaction rule: what of a URL or a text may be shown (logs, metrics, API, UI).

A URL keeps its scheme, host, path and the names of its query parameters; its user and
password, the values of query parameters whose name looks secret (``token``, ``password``,
``api_key``, ``sig``...), and every path segment or query value that looks like a key
(:func:`token_like`: 16 characters or more of letters and digits mixed, as in a Slack or
Discord webhook's path or an Azure function's ``?code=``), become ``***``. A URL whose
authority cannot be told apart safely (an unencoded ``@`` in its path, query or fragment: a
password with a ``/`` in it, say) is masked whole after the scheme. Free text (an exception
message, a library's log line) gets the same treatment for every URL it quotes.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

MASK = "***"

#: Names whose values are secrets, matched anywhere in the name: URL query parameters, and
#: the config's fields (a config error never quotes their values).
SECRET_NAME = re.compile(r"token|pass|pwd|secret|key|auth|sig|credential", re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_USERINFO_IN_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^\s/?#'\"]*)@")
#: (The value stops before punctuation that ends the sentence around it: "...?code=abc: 503".)
_QUERY_PARAM_IN_TEXT = re.compile(
    r"(?P<key>[?&](?P<name>[^=&\s#'\"]+)=)(?P<value>[^&\s#'\"]+?)(?=[,.;:)\]}]*(?:[&\s#'\"]|$))"
)
#: A URL in free text: its scheme, then everything up to a space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: What a generated key is made of (base64, base64url, hex, with separators).
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]+")
#: A key is at least this long...
_MIN_KEY_CHARS = 16
#: ...and mixes at least two of lower case, upper case and digits (or is this long anyway).
_LONG_KEY_CHARS = 32
#: Passwords shorter than this are not searched for in free text (they would mangle it);
#: the URL that holds them is still replaced.
_MIN_SECRET_CHARS = 3


def token_like(value: str) -> bool:
    """Whether ``value`` (a path segment, a query value) looks like a generated key rather
    than a name: ``abcDEF123ghiJKL456`` does, ``Channels``, ``101``, ``live.m3u8`` do not."""
    value = unquote(value)
    if len(value) < _MIN_KEY_CHARS or not _KEY_CHARS.fullmatch(value):
        return False
    kinds = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
        )
    )
    return kinds >= 2 or len(value) >= _LONG_KEY_CHARS


def _redact_path(path: str) -> str:
    return "/".join(MASK if token_like(segment) else segment for segment in path.split("/"))


def url_scheme(url: str) -> str:
    """The lower-cased scheme of ``url`` ("" for a plain path)."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else ""


def redact_url(url: str) -> str:
    """``url`` with its user, password and secret-looking query values replaced by ``***``.

    ``rtsp://admin:pw@cam/stream?token=x`` -> ``rtsp://***:***@cam/stream?token=***``.
    A URL that does not parse cleanly is masked whole after the scheme; a plain path is
    returned as it is.
    """
    scheme = url_scheme(url)
    if not scheme:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{scheme}://{MASK}"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{MASK}:{MASK}@{host}" if ":" in userinfo else f"{MASK}@{host}"
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        # Maybe a user or password with an unencoded '/', '?' or '#' that split the
        # authority: then no part of it can be shown safely.
        return f"{scheme}://{MASK}"
    query = "&".join(_redact_param(p) for p in parts.query.split("&")) if parts.query else ""
    out = f"{url[: len(scheme)]}://{netloc}{_redact_path(parts.path)}"
    if query:
        out += f"?{query}"
    if parts.fragment:
        out += f"#{parts.fragment}"
    return out


def _redact_param(param: str) -> str:
    name, eq, value = param.partition("=")
    secret = SECRET_NAME.search(unquote(name)) or token_like(value)
    return f"{name}={MASK}" if eq and secret else param


def redact_text(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """Mask URL credentials and secret query values anywhere in ``text``, then ``secrets``."""

    def userinfo(match: re.Match[str]) -> str:
        masked = f"{MASK}:{MASK}" if ":" in match.group(2) else MASK
        return f"{match.group(1)}{masked}@"

    def param(match: re.Match[str]) -> str:
        if SECRET_NAME.search(unquote(match.group("name"))) or token_like(match.group("value")):
            return f"{match.group('key')}{MASK}"
        return match.group(0)

    def path(match: re.Match[str]) -> str:
        url = match.group(0)
        start = url.find("/", url.find("://") + 3)
        if start < 0:
            return url
        end = min(
            (i for i in (url.find("?", start), url.find("#", start)) if i >= 0), default=len(url)
        )
        return url[:start] + _redact_path(url[start:end]) + url[end:]

    text = _USERINFO_IN_TEXT.sub(userinfo, text)
    text = _URL_IN_TEXT.sub(path, text)
    text = _QUERY_PARAM_IN_TEXT.sub(param, text)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def secrets_of(url: str) -> list[str]:
    """The password of ``url``, as written and percent-decoded, longest first ([] if none).

    For texts that quote it outside the URL (FFmpeg's messages sometimes do).
    """
    scheme = _SCHEME.match(url)
    if not scheme:
        return []
    authority = re.split(r"[/?#]", url[scheme.end() :], maxsplit=1)[0]
    userinfo, at, _ = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return []
    password = userinfo.split(":", 1)[1]
    found = {password, unquote(password)}
    return sorted((s for s in found if len(s) >= _MIN_SECRET_CHARS), key=len, reverse=True)
