"""``python -m streamer deadletters``: listing and re-driving the dead letters of a running
sink (a real receiver, tests/webhook_receiver.py, and the real outbox), and its exit codes.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from streamer.cli import deadletters as outbox_cli
from streamer.config import (
    load_config,
)
from streamer.foundation.metrics import Metrics
from tests.streamer.delivery.webhook_setup import (
    open_sink,
    sample,
)
from tests.webhook_receiver import (
    Receiver,
    answer,
    eventually,
    make_event,
)


async def test_400_is_a_dead_letter_listed_and_redriven_by_the_cli(
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", receiver.secret)
    config_path = tmp_path / "site.yaml"
    config_path.write_text(
        textwrap.dedent(
            f"""
            cameras: [{{name: gate, url: rtsp://cam/x}}]
            webhooks:
              - name: crm
                url: {receiver.url}
                secret: ${{WEBHOOK_SECRET}}
                retry_initial_delay_s: 0.05
                retry_max_delay_s: 0.2
            outbox:
              path: data/outbox.sqlite3
            """
        )
    )
    config = load_config(config_path)
    assert config.outbox.path == tmp_path / "data" / "outbox.sqlite3"
    rejected, accepted = make_event("gate"), make_event("gate")

    accept_all = False

    async def by_event(received: Any) -> Any:
        if received.webhook_id == rejected.event_id and not accept_all:
            return await answer(400, "unknown plate format")(received)
        return await answer(200)(received)

    receiver.default = by_event
    metrics = Metrics()
    sink = await open_sink(config, metrics)
    try:
        await sink.append(rejected)
        await sink.append(accepted)
        # The dead letter does not hold up the camera's next event.
        await eventually(lambda: accepted.event_id in receiver.delivered_ids(), 10, "next event")
        assert await sink.outbox.state(rejected.event_id, "crm") == "dead"
        assert sample(metrics, "lpr_webhook_dead_letters_total", target="crm") == 1

        capsys.readouterr()
        # Listing reads the local outbox: no target's secret is needed for it.
        monkeypatch.delenv("WEBHOOK_SECRET")
        argv = ["deadletters", "list", "--config", str(config_path)]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        out = capsys.readouterr().out
        assert rejected.event_id in out and "HTTP 400: unknown plate format" in out
        assert accepted.event_id not in out and "1 dead letter(s)" in out
        assert receiver.secret not in out
        # Re-driving sends to the configured targets: it reads the whole config.
        argv = ["deadletters", "redrive", "--config", str(config_path), "--all"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 2
        assert "environment variable WEBHOOK_SECRET is not set" in capsys.readouterr().err
        assert await sink.outbox.state(rejected.event_id, "crm") == "dead"
        monkeypatch.setenv("WEBHOOK_SECRET", receiver.secret)

        accept_all = True
        argv = [
            "deadletters",
            "redrive",
            "--config",
            str(config_path),
            "--event-id",
            rejected.event_id,
        ]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "re-driven: 1 dead letter(s)" in capsys.readouterr().out
        # The running service picks the re-driven event up (it polls the outbox).
        await eventually(lambda: rejected.event_id in receiver.delivered_ids(), 10, "re-drive")

        argv = ["deadletters", "list", "--config", str(config_path), "--target", "crm"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "no dead letters" in capsys.readouterr().out
        argv = ["deadletters", "redrive", "--config", str(config_path), "--event-id", "nope"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 1
        assert "not a dead letter: nope" in capsys.readouterr().err
        argv = ["deadletters", "redrive", "--config", str(config_path), "--all"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "re-driven: 0" in capsys.readouterr().out
    finally:
        await sink.close()
    assert receiver.delivered_ids().count(rejected.event_id) == 1


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cameras: [{name: gate, url: rtsp://cam/x}]\nwebhooks: [{name: x}]\n")
    assert outbox_cli.main(["deadletters", "redrive", "--all", "--config", str(bad)]) == 2
    assert "webhooks[x].url: required key is missing" in capsys.readouterr().err
    # list reads the outbox section alone: its own errors still stop it, named.
    bad.write_text("cameras: []\noutbox: {path: '${OUTBOX_DIR}/o.db'}\n")
    assert outbox_cli.main(["deadletters", "list", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "outbox.path: environment variable OUTBOX_DIR is not set" in err, err
    bad.write_text("cameras: []\noutbox: {retention_s: -1}\n")
    assert outbox_cli.main(["deadletters", "list", "--config", str(bad)]) == 2
    assert "outbox.retention_s:" in capsys.readouterr().err
    assert outbox_cli.main(["deadletters", "list", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("cameras: [{name: gate, url: rtsp://cam/x}]\n")
    assert outbox_cli.main(["deadletters", "list", "--config", str(good)]) == 1
    assert "no outbox at" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # the CLI never creates an outbox
    assert outbox_cli.main(["deadletters", "redrive", "--config", str(good)]) == 2
    assert outbox_cli.main(["deadletters"]) == 2
