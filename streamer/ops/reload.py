"""Reload without restart: what a new config changes, and a watcher of the config file.

:func:`plan` compares the running settings with a new, valid config:

- cameras: added ones start, removed (or disabled) ones stop after flushing their open
  passes, changed ones (any key of their section) restart, the others are left alone (no
  dropped frame, no reconnect);
- the decision rules (``tracker``, ``events`` but its sinks, ``known_plates``) apply to every
  running camera at once, open tracks keeping their evidence;
- ``webhooks``, ``mqtt``: the event log's consumers are swapped in place
  (streamer/delivery/consumers.py, ``Consumers.replace``): an unchanged target runs on, a
  new or changed one opens before the one it replaces stops (no event is lost: what a
  stopped one had not delivered stays in the log); MQTT's Home Assistant discovery follows
  the cameras added and removed;
- keys that need a restart (``triton``, ``web``, ``metrics``, ``log``, ``outbox``, ``storage``,
  ``events.stdout``, ``events.file``) are reported and keep their running values.

:class:`Reloader` reads the file again when asked (SIGHUP, ``POST /api/reload``, and with
``reload.watch`` :class:`ConfigWatcher`), refuses an invalid one and has the service
(streamer/app.py) apply the plan.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from streamer.config import CameraConfig, ConfigError, Settings, load_config
from streamer.foundation.metrics import Metrics
from streamer.foundation.shards import Shard

LOG = logging.getLogger(__name__)

#: Sections whose change needs a restart: they are reported and left as they are.
RESTART_SECTIONS = ("triton", "web", "metrics", "log", "outbox", "storage")
#: Keys of ``events`` that pick the sinks (made at start): they need a restart too.
RESTART_EVENT_KEYS = ("stdout", "file")
#: Sections of the delivery targets: a change swaps the event log's consumers.
DELIVERY_SECTIONS = ("webhooks", "mqtt")
#: Sections that set the decision rules of every camera, applied to running cameras.
RULE_SECTIONS = ("tracker", "events", "known_plates")
#: What a reload comes to (``lpr_config_reloads_total``'s outcomes).
OUTCOMES = ("applied", "unchanged", "refused")


@dataclass
class Plan:
    """What applying a new config does (see the module docstring)."""

    settings: Settings  # the new config, with the keys that need a restart as they run now
    added: list[CameraConfig] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[CameraConfig] = field(default_factory=list)
    rules_changed: bool = False
    delivery_changed: bool = False
    needs_restart: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        changes = (self.added, self.removed, self.changed, self.rules_changed)
        return not (any(changes) or self.delivery_changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": [c.name for c in self.added],
            "removed": list(self.removed),
            "restarted": [c.name for c in self.changed],
            "rules_changed": self.rules_changed,
            "delivery_changed": self.delivery_changed,
            "needs_restart": list(self.needs_restart),
        }

    def summary(self) -> str:
        """One line for the log."""
        parts = []
        for sign, names in (
            ("+", [c.name for c in self.added]),
            ("-", self.removed),
            ("~", [c.name for c in self.changed]),
        ):
            parts += [f"{sign}{name}" for name in names]
        text = f"cameras {' '.join(parts)}" if parts else "cameras unchanged"
        if self.rules_changed:
            text += "; decision rules updated"
        if self.delivery_changed:
            text += "; delivery targets updated"
        if self.needs_restart:
            text += f"; needs a restart, left as it runs: {', '.join(self.needs_restart)}"
        return text


def plan(running: Settings, new: Settings, holds: Callable[[str], bool] | None = None) -> Plan:
    """What changes from ``running`` to ``new`` (both valid), for the cameras ``holds``
    says this replica runs (default: all; streamer/foundation/shards.py)."""
    keep: dict[str, Any] = {}
    needs_restart: list[str] = []
    for section in RESTART_SECTIONS:
        before, after = _dump(getattr(running, section)), _dump(getattr(new, section))
        if before != after:
            needs_restart += _changed_keys(section, before, after)
            keep[section] = getattr(running, section)
    events = new.events
    sink_keys = {k: getattr(running.events, k) for k in RESTART_EVENT_KEYS}
    if any(getattr(events, k) != v for k, v in sink_keys.items()):
        needs_restart += [f"events.{k}" for k, v in sink_keys.items() if getattr(events, k) != v]
        keep["events"] = events.model_copy(update=sink_keys)
    effective = new.model_copy(update=keep)
    held = holds or (lambda _: True)
    old_cameras = {c.name: c for c in running.enabled_cameras if held(c.name)}
    new_cameras = {c.name: c for c in effective.enabled_cameras if held(c.name)}
    result = Plan(effective, needs_restart=needs_restart)
    result.added = [c for name, c in new_cameras.items() if name not in old_cameras]
    result.removed = [name for name in old_cameras if name not in new_cameras]
    result.changed = [
        c
        for name, c in new_cameras.items()
        if name in old_cameras and _dump(old_cameras[name]) != _dump(c)
    ]
    result.delivery_changed = any(
        _dump(getattr(running, s)) != _dump(getattr(effective, s)) for s in DELIVERY_SECTIONS
    )
    result.rules_changed = any(
        _dump(getattr(running, s)) != _dump(getattr(effective, s)) for s in RULE_SECTIONS
    )
    return result


def _dump(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dump(v) for v in value]
    # Secrets compare by value here and are never shown: only key names are reported.
    dump = getattr(value, "model_dump", None)
    return _secrets_revealed(dump()) if dump is not None else value


def _secrets_revealed(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _secrets_revealed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_secrets_revealed(v) for v in data]
    reveal = getattr(data, "get_secret_value", None)
    return reveal() if reveal is not None else data


def _changed_keys(prefix: str, before: Any, after: Any) -> list[str]:
    """The dotted keys under ``prefix`` whose values differ (names only, never values)."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            if before.get(key) != after.get(key):
                keys += _changed_keys(f"{prefix}.{key}", before.get(key), after.get(key))
        return keys
    return [prefix]


class ConfigWatcher:
    """Tells when the config file has changed and settled (``reload.watch``).

    Why polling and not inotify (watchfiles, watchdog): one small file, a stat per interval,
    and it works the same on bind mounts, NFS and Kubernetes ConfigMaps (a symlink swap),
    where file-system events often do not arrive.
    """

    def __init__(self, path: Path, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self._seen = self._fingerprint()

    def _fingerprint(self) -> tuple[Any, ...] | None:
        try:
            stat = os.stat(self.path)  # follows symlinks: a ConfigMap swaps its target
            with open(self.path, "rb") as file:
                digest = hashlib.sha256(file.read()).hexdigest()
        except OSError:
            return None  # deleted or being replaced: wait for it to come back
        return stat.st_size, digest

    async def changed(self) -> None:
        """Return once the file differs from when last seen and is the same twice in a row
        (an editor that writes in several steps has finished)."""
        while True:
            await asyncio.sleep(self.interval_s)
            now = await asyncio.to_thread(self._fingerprint)
            if now is None or now == self._seen:
                continue
            await asyncio.sleep(min(self.interval_s, 0.5))
            settled = await asyncio.to_thread(self._fingerprint)
            if settled == now:
                self._seen = now
                return


class Reloadable(Protocol):
    """What a :class:`Reloader` needs of the service."""

    settings: Settings
    shard: Shard

    async def apply_reload(self, change: Plan) -> None: ...


class Reloader:
    """Reloads the config file of a running service, one reload at a time."""

    def __init__(self, service: Reloadable, path: Path | None, metrics: Metrics) -> None:
        """``path``: the file the service's settings came from (None: reload is refused)."""
        self.service = service
        self.path = path
        self.metrics = metrics
        metrics.known(metrics.config_reloads, *((outcome,) for outcome in OUTCOMES))
        self.last: dict[str, Any] | None = None
        self.last_error: str | None = None
        self._wanted = asyncio.Event()
        self._lock = asyncio.Lock()

    def request(self) -> None:
        """Reload soon (a signal handler may call this): :meth:`run` does it."""
        self._wanted.set()

    def state(self) -> dict[str, object] | None:
        """The last reload and the last refusal, for ``/readyz`` (None before any)."""
        if self.last is None and self.last_error is None:
            return None
        return {"last": self.last, "last_error": self.last_error}

    async def reload(self, trigger: str) -> dict[str, Any]:
        """Read the file again and apply what changed; the outcome as a dict.

        An invalid file is refused with the one-line message of a start-up error (logged at
        ERROR, counted); the running config stays. ``trigger`` (sighup, api, file) is logged.
        """
        async with self._lock:
            if self.path is None:
                return self._refused(trigger, "no config file to reload (started without one)")
            try:
                new = await asyncio.to_thread(load_config, self.path)
            except ConfigError as exc:  # the start-up message, its problems on one line
                return self._refused(trigger, " ".join(s.strip() for s in str(exc).splitlines()))
            change = plan(self.service.settings, new, self.service.shard.holds)
            if change.empty:
                outcome = "unchanged"
                LOG.info("config reloaded (%s): nothing to apply; %s", trigger, change.summary())
            else:
                outcome = "applied"
                await self.service.apply_reload(change)
                LOG.info("config reloaded (%s): %s", trigger, change.summary())
            self.service.settings = change.settings
            self.metrics.config_reloads.labels(outcome).inc()
            self.last = {"outcome": outcome, "trigger": trigger, **change.to_dict()}
            self.last_error = None
            return self.last

    def _refused(self, trigger: str, reason: str) -> dict[str, Any]:
        LOG.error("config reload (%s) refused, the running config stays: %s", trigger, reason)
        self.metrics.config_reloads.labels("refused").inc()
        self.last_error = reason
        return {"outcome": "refused", "trigger": trigger, "error": reason}

    async def run(self) -> None:
        """The ``config`` part: reload on :meth:`request` and, with ``reload.watch``, when
        the file changes; until cancelled."""
        watch = self.service.settings.reload
        watcher = (
            ConfigWatcher(self.path, watch.interval_s)
            if watch.watch and self.path is not None
            else None
        )
        while True:
            waits: set[asyncio.Task[Any]] = {asyncio.create_task(self._wanted.wait())}
            if watcher is not None:
                waits.add(asyncio.create_task(watcher.changed()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
            trigger = "sighup" if self._wanted.is_set() else "file"
            self._wanted.clear()
            await self.reload(trigger)
