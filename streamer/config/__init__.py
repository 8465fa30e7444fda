"""The service's YAML configuration: one pydantic schema, and its loader.

``load_config(path)`` reads the file, expands ``${VAR}`` / ``${VAR:-default}``
in string values (``$${`` is a literal ``${``), validates the tree against
:class:`Settings` and raises :class:`ConfigError` with one message that names
the file, the key (``cameras[gate].sample_fps``) and the reason.

Rules the schema keeps (see ``docs/config.md``):

* every model forbids unknown keys, so a typo fails loudly;
* every field has a description and bounds; cross-field checks are small
  field validators, so an error points at the field to fix;
* every default is defined once, in its section's field: code that needs one
  (the tracker's parameters, say) builds it from the section;
* validators do no I/O: a file camera's existence is checked by the reader;
* relative paths (file cameras, ``events.file``, ``triton.model_repository``,
  ``outbox.path``) resolve against the folder of the config file, lexically;
* secrets stay out of logs: a camera's ``repr``/``str`` shows
  :attr:`CameraConfig.redacted_url` (webhook URLs likewise), ``web.token`` and
  ``webhooks[].secret`` and ``mqtt.password`` are ``SecretStr``, and no
  :class:`ConfigError` message quotes a URL's user, password or secret query
  parameter.

The modules: ``base`` (the strict base of every section, shared field helpers),
one per group of sections (``cameras``, ``inference``, ``decisions``,
``delivery``, ``mqtt``, ``storage``, ``service``), ``settings`` (the root), ``loader`` (bounded YAML
without duplicate keys), ``interpolate`` (``${VAR}``) and ``errors`` (the
messages). Other packages import from here.
"""

from streamer.config.base import CAMERA_NAME_PATTERN
from streamer.config.cameras import CameraConfig, MotionConfig
from streamer.config.decisions import EventsConfig, KnownPlatesConfig, TrackerConfig
from streamer.config.delivery import (
    FILE_CONSUMER,
    HISTORY_CONSUMER,
    LOCAL_CONSUMERS,
    STDOUT_CONSUMER,
    OutboxConfig,
    WebhookTargetConfig,
)
from streamer.config.errors import ConfigError
from streamer.config.inference import TritonConfig
from streamer.config.loader import load_config, load_outbox_config, parse_yaml
from streamer.config.mqtt import MQTT_TARGET, DiscoveryConfig, MqttConfig, MqttTlsConfig
from streamer.config.service import (
    IceServerConfig,
    LogConfig,
    MetricsConfig,
    ReloadConfig,
    WebConfig,
)
from streamer.config.settings import Settings
from streamer.config.storage import StorageConfig

__all__ = [
    "CAMERA_NAME_PATTERN",
    "FILE_CONSUMER",
    "HISTORY_CONSUMER",
    "LOCAL_CONSUMERS",
    "MQTT_TARGET",
    "STDOUT_CONSUMER",
    "CameraConfig",
    "ConfigError",
    "DiscoveryConfig",
    "EventsConfig",
    "IceServerConfig",
    "KnownPlatesConfig",
    "LogConfig",
    "MetricsConfig",
    "MotionConfig",
    "MqttConfig",
    "MqttTlsConfig",
    "OutboxConfig",
    "ReloadConfig",
    "Settings",
    "StorageConfig",
    "TrackerConfig",
    "TritonConfig",
    "WebConfig",
    "WebhookTargetConfig",
    "load_config",
    "load_outbox_config",
    "parse_yaml",
]
