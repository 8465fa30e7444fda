"""streamer.ops.reload: what a new config changes, and the watcher of the config file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from streamer.config import Settings, load_config
from streamer.ops.reload import ConfigWatcher, plan


def _settings(tmp_path: Path, text: str, name: str = "c.yaml") -> Settings:
    path = tmp_path / name
    path.write_text(text)
    return load_config(path, env={"CAM_PASSWORD": "s3cret-one"})


BASE = (
    "cameras:\n"
    "  - {name: a, url: 'rtsp://cam-a/live'}\n"
    "  - {name: b, url: 'rtsp://cam-b/live'}\n"
    "  - {name: d, url: 'rtsp://admin:${CAM_PASSWORD}@cam-d/live', sample_fps: 2}\n"
)


def test_cameras_added_removed_changed_and_left_alone(tmp_path: Path) -> None:
    running = _settings(tmp_path, BASE)
    new = _settings(
        tmp_path,
        "cameras:\n"
        "  - {name: a, url: 'rtsp://cam-a/live'}\n"  # as it was
        "  - {name: c, url: 'rtsp://cam-c/live'}\n"  # added
        "  - {name: d, url: 'rtsp://admin:${CAM_PASSWORD}@cam-d/live', sample_fps: 3}\n",
        "new.yaml",
    )
    change = plan(running, new)
    assert [c.name for c in change.added] == ["c"]
    assert change.removed == ["b"]
    assert [c.name for c in change.changed] == ["d"]
    assert not change.rules_changed and not change.needs_restart and not change.empty
    assert change.summary() == "cameras +c -b ~d"
    assert change.to_dict() == {
        "added": ["c"],
        "removed": ["b"],
        "restarted": ["d"],
        "rules_changed": False,
        "delivery_changed": False,
        "needs_restart": [],
    }


def test_a_disabled_camera_is_removed_and_an_identical_file_changes_nothing(
    tmp_path: Path,
) -> None:
    running = _settings(tmp_path, BASE)
    assert plan(running, _settings(tmp_path, BASE, "same.yaml")).empty
    disabled = BASE.replace(
        "name: b, url: 'rtsp://cam-b/live'", "name: b, url: 'x', enabled: false"
    )
    change = plan(running, _settings(tmp_path, disabled, "disabled.yaml"))
    assert change.removed == ["b"] and not change.added and not change.changed


def test_a_changed_password_restarts_the_camera_without_showing_it(tmp_path: Path) -> None:
    running = _settings(tmp_path, BASE)
    path = tmp_path / "new.yaml"
    path.write_text(BASE)
    new = load_config(path, env={"CAM_PASSWORD": "s3cret-two"})
    change = plan(running, new)
    assert [c.name for c in change.changed] == ["d"]
    assert "s3cret" not in repr(change.to_dict()) + change.summary()


@pytest.mark.parametrize(
    ("section", "needs_restart"),
    [
        ("triton: {url: 'other-host:8001'}\n", ["triton.url"]),
        ("web: {port: 9090}\n", ["web.port"]),
        ("metrics: {port: 9191}\n", ["metrics.port"]),
        ("events: {stdout: false}\n", ["events.stdout"]),
        ("log: {level: DEBUG}\n", ["log.level"]),
    ],
)
def test_keys_that_need_a_restart_are_reported_and_keep_their_running_values(
    tmp_path: Path, section: str, needs_restart: list[str]
) -> None:
    running = _settings(tmp_path, BASE)
    change = plan(running, _settings(tmp_path, BASE + section, "new.yaml"))
    assert change.needs_restart == needs_restart
    assert change.empty and not change.rules_changed
    assert change.settings.model_dump() == running.model_dump()  # left as they run
    assert needs_restart[0] in change.summary()


def test_decision_rules_apply_live_and_the_event_sinks_do_not(tmp_path: Path) -> None:
    running = _settings(tmp_path, BASE)
    new = _settings(
        tmp_path,
        BASE
        + "tracker: {min_hits: 3}\n"
        + "events: {min_reads: 3, stdout: false}\n"
        + "known_plates: {staff: [O567AM76]}\n",
        "new.yaml",
    )
    change = plan(running, new)
    assert change.rules_changed and not change.added and not change.changed
    assert change.needs_restart == ["events.stdout"]
    assert change.settings.tracker.min_hits == 3 and change.settings.events.min_reads == 3
    assert change.settings.events.stdout is True  # the running sink stays
    assert "staff" in change.settings.known_plates


async def test_the_watcher_sees_edits_and_replacements_not_touches(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    watcher = ConfigWatcher(path, 0.05)

    async def changed_within(seconds: float) -> bool:
        try:
            await asyncio.wait_for(watcher.changed(), seconds)
        except TimeoutError:
            return False
        return True

    os.utime(path)  # the same bytes: nothing to reload
    assert not await changed_within(0.5)
    path.write_text(BASE + "tracker: {min_hits: 3}\n")
    assert await changed_within(5)
    assert not await changed_within(0.5)  # seen once
    # An editor (or a Kubernetes ConfigMap) replaces the file: a rename over it.
    replacement = tmp_path / "c.yaml.tmp"
    replacement.write_text(BASE)
    path.unlink()
    assert not await changed_within(0.3)  # gone for a moment: wait for it
    replacement.rename(path)
    assert await changed_within(5)


def test_webhook_targets_are_replaced_live(tmp_path: Path) -> None:
    hook = (
        "webhooks:\n  - {name: crm, url: 'https://crm.example/hook', "
        "secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'}\n"
    )
    running = _settings(tmp_path, BASE)
    change = plan(running, _settings(tmp_path, BASE + hook, "new.yaml"))
    assert change.delivery_changed and not change.needs_restart and not change.empty
    assert change.summary() == "cameras unchanged; delivery targets updated"
    assert [t.name for t in change.settings.webhooks] == ["crm"]
    assert "whsec_" not in repr(change.to_dict())
