from pathlib import Path

import av
import numpy as np
import pytest

from streamer.config import EventsConfig
from streamer.domain.frames import Frame
from streamer.tracking import evidence
from streamer.tracking.evidence import Sample, box_shift, image_change, is_new, plate_signature
from tests.footage import YARD_CLIP, encode_yard

BOX = (40.0, 20.0, 120.0, 40.0)  # 80 x 20 pixels
#: The config's default thresholds (events.evidence_min_change / evidence_min_shift).
MIN_CHANGE = EventsConfig().evidence_min_change
MIN_SHIFT = EventsConfig().evidence_min_shift


def _scene(seed: int = 0, offset: int = 0) -> np.ndarray:
    """A 60x200 frame with a textured "plate" at BOX shifted right by ``offset`` pixels."""
    rng = np.random.default_rng(seed)
    image = np.full((60, 200, 3), 90, np.uint8)
    image[20:40, 40 + offset : 120 + offset] = rng.integers(0, 255, (20, 80, 1), np.uint8)
    return image


def test_the_same_image_is_not_new() -> None:
    image = _scene()
    last = Sample.of(image, BOX)
    assert image_change(last, image.copy()) == 0.0
    assert not is_new(last, image.copy(), BOX, MIN_CHANGE, MIN_SHIFT)


def test_a_pixel_of_box_jitter_on_a_still_image_is_not_new() -> None:
    # The detector's box moves by a pixel on the same picture: compared in the last box.
    image = _scene()
    last = Sample.of(image, BOX)
    jittered = (41.0, 19.4, 120.6, 40.5)
    assert box_shift(BOX, jittered) < MIN_SHIFT
    assert not is_new(last, image, jittered, MIN_CHANGE, MIN_SHIFT)


def test_a_plate_that_moves_is_new() -> None:
    last = Sample.of(_scene(), BOX)
    moved = _scene(offset=4)  # 4 px: a fifth of the plate's height
    box = (44.0, 20.0, 124.0, 40.0)
    assert box_shift(BOX, box) == pytest.approx(0.2)
    assert is_new(last, moved, box, MIN_CHANGE, MIN_SHIFT)
    # Moving by a pixel a frame adds up: compared with the last *counted* read, not the last.
    assert image_change(last, _scene(offset=1)) >= MIN_CHANGE


def test_a_changed_picture_in_the_same_place_is_new() -> None:
    image = _scene()
    last = Sample.of(image, BOX)
    brighter = image.copy()
    brighter[20:40, 40:120] = np.clip(brighter[20:40, 40:120].astype(int) + 3, 0, 255)
    assert image_change(last, brighter) == pytest.approx(3.0, abs=0.2)
    assert is_new(last, brighter, BOX, MIN_CHANGE, MIN_SHIFT)
    assert not is_new(last, brighter, BOX, min_change=5.0, min_shift=MIN_SHIFT)


def test_zero_thresholds_count_every_read() -> None:
    image = _scene()
    assert is_new(Sample.of(image, BOX), image, BOX, min_change=0.0, min_shift=0.0)


def test_a_box_outside_the_image_gives_an_empty_signature() -> None:
    signature = plate_signature(_scene(), (500.0, 500.0, 600.0, 520.0))
    assert signature.shape == evidence.SIGNATURE_SIZE[::-1] and not signature.any()


@pytest.mark.parametrize("limited", [False, True])
def test_a_decoded_frame_is_compared_on_its_y_plane_as_on_its_bgr(
    limited: bool, tmp_path: Path
) -> None:
    """The tracker compares plate crops on a decoded frame's Y plane (a view, no conversion of
    the picture on the event loop): full range (the yard clip's yuvj420p) or limited range (an
    ffmpeg re-encode), the signature is within 3 grey levels of the BGR picture's (what
    counts is the change between two reads, which a constant offset does not alter)."""
    clip = encode_yard(tmp_path / "limited.ts", "[0:v]copy[out]") if limited else YARD_CLIP
    with av.open(str(clip)) as container:
        picture = next(f for i, f in enumerate(container.decode(video=0)) if i == 30)
    frame = Frame("yard", 30, 2.0, 0.0, 0.0, picture)
    plane, is_limited = frame.luma()
    assert is_limited == limited and plane.shape == (picture.height, picture.width)
    assert plane.base is not None  # a view of the decoder's plane
    assert isinstance(frame.pixels, av.VideoFrame)  # nothing converted
    bgr = picture.to_ndarray(format="bgr24")
    for box in [(350.0, 500.0, 470.0, 530.0), (1200.0, 700.0, 1300.0, 740.0)]:
        from_y = plate_signature(plane, box, is_limited)
        from_bgr = plate_signature(bgr, box)
        assert np.abs(from_y - from_bgr).max() <= 3.0, np.abs(from_y - from_bgr).max()
