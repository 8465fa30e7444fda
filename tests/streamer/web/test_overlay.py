"""The live view's annotation: boxes, labels, colours, scaling (pure functions)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from streamer.domain.cameras import Snapshot
from streamer.domain.frames import Frame
from streamer.domain.plate_pass import TrackedPlate
from streamer.web.overlay import (
    BOX_COLORS,
    CONFIRMED_COLOR,
    TENTATIVE_COLOR,
    css_color,
    draw,
    encode_jpeg,
    label,
    read_label,
    render,
)


def _mask(image: np.ndarray, color: tuple[int, int, int]) -> np.ndarray:
    return np.all(image == np.array(color, np.uint8), axis=2)


def _frame(width: int, height: int, value: int = 90) -> Frame:
    return Frame("yard", 7, 1.0, 0.0, 0.0, np.full((height, width, 3), value, np.uint8))


def test_label_has_the_track_id_when_there_is_one() -> None:
    box = (0.0, 0.0, 1.0, 1.0)
    assert label(TrackedPlate(box, "O567AM76", 1, True, decided=True)) == "O567AM76 #1"
    assert label(TrackedPlate(box, "C567AM76", None, False, decided=True)) == "C567AM76"


def test_an_undecided_track_is_marked_and_the_raw_read_shown_when_it_differs() -> None:
    box = (0.0, 0.0, 1.0, 1.0)
    tentative = TrackedPlate(box, "O567AM76", 1, True, read="C567AM76")
    assert (label(tentative), read_label(tentative)) == ("O567AM76? #1", "C567AM76")
    same = TrackedPlate(box, "O567AM76", 1, True, read="O567AM76", decided=True)
    assert (label(same), read_label(same)) == ("O567AM76 #1", "")


def test_the_raw_read_is_a_second_line_of_the_label() -> None:
    image = np.full((720, 1280, 3), 90, np.uint8)
    box = (1000.0, 300.0, 1100.0, 340.0)
    one = draw(image, [TrackedPlate(box, "O567AM76", 1, True, read="O567AM76", decided=True)])
    two = draw(image, [TrackedPlate(box, "O567AM76", 1, True, read="C567AM76", decided=True)])
    # The label grows upwards from the box: a taller green area for the two lines.
    rows_one = _mask(one[:300, 1000:1160], CONFIRMED_COLOR).any(axis=1).sum()
    rows_two = _mask(two[:300, 1000:1160], CONFIRMED_COLOR).any(axis=1).sum()
    assert rows_two > rows_one * 1.4


def test_confirmed_green_tentative_yellow_on_a_copy() -> None:
    image = np.full((720, 1280, 3), 90, np.uint8)
    before = image.copy()
    plates = [
        TrackedPlate((1000.0, 300.0, 1100.0, 340.0), "O567AM76", 1, True),
        TrackedPlate((100.0, 400.0, 180.0, 430.0), "Y836XH76", 2, False),
    ]
    out = draw(image, plates)
    assert np.array_equal(image, before)  # the input is untouched
    assert out is not image and out.shape == image.shape
    green, yellow = _mask(out, CONFIRMED_COLOR), _mask(out, TENTATIVE_COLOR)
    # Each box's outline is drawn in its colour, right on the box's edges.
    assert green[300, 1000:1100].all() and green[300:340, 1100].all()
    assert yellow[400, 100:180].all() and yellow[400:430, 100].all()
    assert not green[380:460, 60:220].any() and not yellow[260:360, 960:1140].any()
    # The filled label sits above the box, with dark text in it.
    label_area = out[260:300, 1000:1160]
    assert _mask(label_area, CONFIRMED_COLOR).mean() > 0.4
    assert (label_area.max(axis=2) < 60).sum() > 100
    # Inside the box, the picture is unchanged.
    assert np.array_equal(out[310:330, 1010:1090], image[310:330, 1010:1090])


def test_the_legend_gives_the_colours_the_boxes_are_drawn_in() -> None:
    assert css_color((255, 128, 0)) == "#0080ff"  # BGR in, #rrggbb out
    image = np.full((200, 300, 3), 90, np.uint8)
    plates = [
        TrackedPlate((20.0, 100.0, 120.0, 140.0), "O567AM76", 1, True),
        TrackedPlate((160.0, 100.0, 260.0, 140.0), "Y836XH76", None, False),
    ]
    out = draw(image, plates)

    def pixel(y: int, x: int) -> str:
        blue, green, red = (int(v) for v in out[y, x])
        return css_color((blue, green, red))

    drawn = {"confirmed": pixel(100, 60), "tentative": pixel(100, 200)}  # the top edges
    assert {box["kind"]: box["color"] for box in BOX_COLORS} == drawn
    assert drawn["confirmed"] != drawn["tentative"]
    assert all(box["meaning"] for box in BOX_COLORS)


def test_label_goes_below_a_box_at_the_top_and_boxes_are_clipped() -> None:
    image = np.zeros((200, 300, 3), np.uint8)
    out = draw(image, [TrackedPlate((-20.0, 2.0, 400.0, 30.0), "A001AA77", 3, True)])
    green = _mask(out, CONFIRMED_COLOR)
    assert green[2, :].all()  # clipped to the frame, not wrapped or dropped
    assert green[35:50, 5:60].mean() > 0.4  # the label below the box
    assert draw(image, []).sum() == 0


def test_render_scales_to_at_most_1280_wide_with_even_sides() -> None:
    snapshot = Snapshot(
        _frame(1920, 1080), (TrackedPlate((1523.0, 336.0, 1577.0, 369.0), "O567AM76", 1, True),)
    )
    out = render(snapshot)
    assert out.shape == (720, 1280, 3)
    green = _mask(out, CONFIRMED_COLOR)
    # The box is scaled with the picture: 1523 * 2/3 = 1015.3, 336 * 2/3 = 224.
    assert green[224, 1016:1050].all()
    assert render(Snapshot(_frame(641, 361), ())).shape == (360, 640, 3)
    assert render(Snapshot(_frame(640, 360), ()), max_width=320).shape == (180, 320, 3)


@pytest.mark.parametrize("quality", [50, 90])
def test_jpeg_round_trip(quality: int) -> None:
    image = render(Snapshot(_frame(640, 360), (TrackedPlate((10, 40, 90, 70), "X", None, False),)))
    decoded = cv2.imdecode(np.frombuffer(encode_jpeg(image, quality), np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == image.shape
    assert np.abs(decoded.astype(int) - image.astype(int)).mean() < 3
