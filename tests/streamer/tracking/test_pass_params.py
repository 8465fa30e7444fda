"""The pass detector's rules: from the ``events:`` config section and the camera's ``decide``."""

import dataclasses

from streamer.config import CameraConfig, EventsConfig
from streamer.tracking.pass_params import PassParams
from streamer.tracking.passes import PassDetector
from tests.streamer.tracking.pass_rules import CAMERA


def test_params_come_from_the_events_section_and_the_camera() -> None:
    events = EventsConfig(max_delay_s=9.0, updates=False)
    params = PassParams.from_config(events, "sure")
    rules = {f.name for f in dataclasses.fields(PassParams)} - {"decide"}
    assert dataclasses.asdict(params) == {**events.model_dump(include=rules), "decide": "sure"}
    defaults = PassDetector(CAMERA).params
    assert defaults == PassParams.from_config(EventsConfig(), defaults.decide)
    assert defaults.decide == CameraConfig.model_fields["decide"].default
