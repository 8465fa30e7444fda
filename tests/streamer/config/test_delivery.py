"""The ``webhooks`` and ``outbox`` sections: secrets from the environment and never shown,
messages that name the key, the reference config and the docs covering every key."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from streamer.config import (
    CameraConfig,
    ConfigError,
    OutboxConfig,
    Settings,
    WebhookTargetConfig,
    load_config,
)
from tests.streamer.config.config_files import PROJECT
from tests.webhook_receiver import (
    new_secret,
)


def config_error(tmp_path: Path, webhooks: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / "site.yaml"
    path.write_text(f"cameras: [{{name: gate, url: rtsp://cam/x}}]\n{webhooks}")
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return str(info.value)


def test_config_loads_targets_with_secret_from_the_environment(tmp_path: Path) -> None:
    secret = new_secret()
    path = tmp_path / "conf" / "site.yaml"
    path.parent.mkdir()
    path.write_text(
        "cameras: [{name: gate, url: rtsp://cam/x}]\n"
        "webhooks:\n"
        "  - {name: crm, url: 'https://user:pw@crm.example.com/hook?token=t0k', "
        "secret: '${WEBHOOK_SECRET}'}\n"
        "  - {name: erp, url: 'http://erp:8080/in', secret: '${WEBHOOK_SECRET}', crop: url, "
        "public_base_url: 'https://lpr.example.com/', enabled: false, payload: bare}\n"
    )
    loaded = load_config(path, env={"WEBHOOK_SECRET": secret})
    crm, erp = loaded.webhooks
    assert crm.secret.get_secret_value() == secret
    assert (crm.timeout_s, crm.max_concurrency, crm.crop, crm.enabled) == (10, 4, "base64", True)
    assert (crm.retry_initial_delay_s, crm.retry_max_delay_s, crm.retry_after_max_s) == (1, 60, 600)
    assert erp.public_base_url == "https://lpr.example.com" and not erp.enabled
    assert (crm.payload, erp.payload) == ("envelope", "bare")
    assert (crm.previous_secrets, crm.retry_rejected_for_s) == ([], 600)
    assert loaded.outbox.path == path.parent / "data" / "outbox.sqlite3"  # the config's folder
    assert loaded.outbox.retention_s == 7 * 86400 and loaded.outbox.prune_interval_s == 600
    for text in (repr(loaded), str(loaded), json.dumps(loaded.redacted()), repr(crm)):
        assert secret not in text and "pw@" not in text and "t0k" not in text
    assert (
        loaded.redacted()["webhooks"][0]["url"] == "https://***:***@crm.example.com/hook?token=***"
    )
    # Built in code (no config file), the default path stays relative.
    assert Settings(cameras=[CameraConfig(name="a", url="x.ts")]).webhooks == []
    assert Settings(cameras=[CameraConfig(name="a", url="x.ts")]).outbox.path == Path(
        "data/outbox.sqlite3"
    )


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "does not start with 'whsec_'"),
        ("whsec_not base64!!", "is not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "holds 5 bytes"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), "holds 65 bytes"),
    ],
)
def test_bad_secrets_are_rejected_without_being_shown(
    tmp_path: Path, secret: str, expected: str
) -> None:
    message = config_error(
        tmp_path,
        "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}'}]\n",
        env={"S": secret},
    )
    assert "webhooks[crm].secret" in message and expected in message
    assert "whsec_'+base64.b64encode(os.urandom(24))" in message  # how to make one
    assert secret not in message and secret.removeprefix("whsec_") not in message


def test_previous_secrets_and_the_rejection_window_load(tmp_path: Path) -> None:
    secret, old, older = new_secret(), new_secret(), new_secret()
    path = tmp_path / "site.yaml"
    path.write_text(
        "cameras: [{name: gate, url: rtsp://cam/x}]\n"
        "webhooks:\n"
        "  - {name: crm, url: 'https://h/x', secret: '${NEW}', "
        "previous_secrets: ['${OLD}', '${OLDER}'], retry_rejected_for_s: 0}\n"
    )
    loaded = load_config(path, env={"NEW": secret, "OLD": old, "OLDER": older})
    (crm,) = loaded.webhooks
    assert [s.get_secret_value() for s in crm.previous_secrets] == [old, older]
    assert crm.retry_rejected_for_s == 0
    for text in (repr(loaded), str(loaded), json.dumps(loaded.redacted()), repr(crm)):
        assert all(s not in text and s.removeprefix("whsec_") not in text for s in (old, older))
    assert loaded.redacted()["webhooks"][0]["previous_secrets"] == ["**********"] * 2


@pytest.mark.parametrize(
    ("name", "key"),
    [("crm", "webhooks[crm].previous_secrets[1]"), ("CRM!", "webhooks[0].previous_secrets[1]")],
)
@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "does not start with 'whsec_'"),
        ("whsec_not base64!!", "is not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "holds 5 bytes"),
    ],
)
def test_bad_previous_secrets_are_rejected_without_being_shown(
    tmp_path: Path, name: str, key: str, secret: str, expected: str
) -> None:
    good = new_secret()
    message = config_error(
        tmp_path,
        f"webhooks: [{{name: '{name}', url: 'https://h/x', secret: '${{S}}', "
        "previous_secrets: ['${S}', '${BAD}']}]\n",
        env={"S": good, "BAD": secret},
    )
    (line,) = [line for line in message.splitlines() if f"{key}: the secret " in line]
    assert expected in line  # the second one, named by its key, and only it
    assert "previous_secrets[0]" not in message
    assert "whsec_'+base64.b64encode(os.urandom(24))" in message  # how to make one
    for shown in (secret, secret.removeprefix("whsec_"), good, good.removeprefix("whsec_")):
        assert shown not in message


def test_at_most_three_previous_secrets(tmp_path: Path) -> None:
    secrets = [new_secret() for _ in range(5)]
    env = {f"S{i}": s for i, s in enumerate(secrets)}
    previous = ", ".join(f"'${{S{i}}}'" for i in range(1, 5))
    message = config_error(
        tmp_path,
        f"webhooks: [{{name: crm, url: 'https://h/x', secret: '${{S0}}', "
        f"previous_secrets: [{previous}]}}]\n",
        env=env,
    )
    assert "webhooks[crm].previous_secrets: List should have at most 3 items" in message
    assert all(s.removeprefix("whsec_") not in message for s in secrets)
    three = WebhookTargetConfig(
        name="crm", url="https://h/x", secret=secrets[0], previous_secrets=secrets[1:4]
    )
    assert len(three.previous_secrets) == 3


@pytest.mark.parametrize(
    ("webhooks", "expected"),
    [
        (
            "webhooks: [{name: crm, url: 'ftp://h/x', secret: '${S}'}]",
            "webhooks[crm].url: the webhook URL must start with http:// or https://",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', crop: url}]",
            "webhooks[crm].public_base_url: required when crop is url",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', crop: jpeg}]",
            "webhooks[crm].crop: Input should be 'base64', 'url' or 'none'",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', payload: raw}]",
            "webhooks[crm].payload: Input should be 'envelope' or 'bare'",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}'},"
            " {name: crm, url: 'https://h/y', secret: '${S}'}]",
            "webhooks[0] and webhooks[1] are both named 'crm'",
        ),
        (
            "webhooks: [{name: CRM!, url: 'https://h/x', secret: '${S}'}]",
            "target name 'CRM!' is not allowed",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', retry_max_delay_s: 0.5}]",
            "webhooks[crm].retry_max_delay_s: must be >= retry_initial_delay_s (1), got 0.5",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', timeoutt_s: 1}]",
            "webhooks[crm].timeoutt_s: unknown key; did you mean 'timeout_s'?",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x'}]",
            "webhooks[crm].secret: required key is missing",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', retry_rejected_for_s: -1}]",
            "webhooks[crm].retry_rejected_for_s: Input should be greater than or equal to 0",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', "
            "retry_rejected_for_s: 604801}]",
            "webhooks[crm].retry_rejected_for_s: Input should be less than or equal to 604800",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', previous_secrets: '${S}'}]",
            "webhooks[crm].previous_secrets: should be a list, got a string",
        ),
        ("outbox: {retention_s: -1}", "outbox.retention_s: Input should be greater than or equal"),
        ("outbox: {prune_interval_s: 0}", "outbox.prune_interval_s: Input should be greater"),
    ],
)
def test_bad_webhook_config(tmp_path: Path, webhooks: str, expected: str) -> None:
    secret = new_secret()
    message = config_error(tmp_path, webhooks + "\n", env={"S": secret})
    assert expected in message
    assert secret not in message


def test_reference_config_and_docs_cover_the_new_keys() -> None:
    import re

    reference = (PROJECT / "configs" / "reference.yaml").read_text()
    docs = (PROJECT / "docs" / "config.md").read_text()
    for model in (WebhookTargetConfig, OutboxConfig):
        for name, field in model.model_fields.items():
            assert field.description, name
            # The example target is commented out (it needs a receiver and a secret).
            assert re.search(rf"^\s*#?\s*(- )?{name}:", reference, re.MULTILINE), name
            assert f"`{name}`" in docs, name
    assert "${WEBHOOK_SECRET}" in reference
    settings = load_config(PROJECT / "configs" / "reference.yaml", env={"CAM_PASSWORD": "x"})
    assert settings.webhooks == []
    assert settings.outbox.retention_s == OutboxConfig().retention_s
    assert settings.outbox.path == PROJECT / "configs" / "data" / "outbox.sqlite3"
