"""Where the BLS runs the detector: windows of the detector's input planned from a frame's
focus boxes (already in the input's pixels: a 1080p frame is letterboxed at 2/3 into 736x1280,
8 pixels of padding above)."""

from __future__ import annotations

import numpy as np
import pytest

from converters.paths import import_plate_ops, import_regions

plate_ops = import_plate_ops()
regions = import_regions()

FULL_HW = (736, 1280)
REGION_HW = (480, 480)


def _plan(focus: list[list[float]], max_regions: int = 4) -> list | None:
    boxes = np.array(focus, np.float64).reshape(-1, 4)
    return regions.plan_regions(boxes, FULL_HW, REGION_HW, max_regions=max_regions)


def _covers(region: object, box: list[float]) -> bool:
    x1, y1, x2, y2 = box
    r = region
    return bool(
        r.x <= x1 and r.y <= y1 and x2 <= r.x + r.width and y2 <= r.y + r.height  # type: ignore[attr-defined]
    )


def test_a_window_is_centred_on_its_box_on_the_stride_grid() -> None:
    plan = _plan([[600, 300, 660, 330]])
    assert plan is not None and len(plan) == 1
    window = plan[0]
    assert (window.width, window.height) == (480, 480)
    assert window.x % regions.STRIDE == 0 and window.y % regions.STRIDE == 0
    assert _covers(window, [600, 300, 660, 330])
    assert abs(window.x + 240 - 630) <= regions.STRIDE / 2
    assert abs(window.y + 240 - 315) <= regions.STRIDE / 2
    # Near an edge the window is moved inside the input, off-centre.
    low = _plan([[600, 700, 660, 730]])
    assert low is not None and low[0].y == 736 - 480


def test_a_window_is_the_same_window_of_the_whole_input() -> None:
    """Cut from the letterboxed image and made a tensor, a window is bit for bit the window of
    the whole frame's tensor: the region detector sees the very pixels."""
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    image, transform = plate_ops.letterbox_image(frame, FULL_HW)
    whole, same = plate_ops.letterbox(frame, FULL_HW)
    assert same == transform and image.shape == (736, 1280, 3)
    window = regions.Region(64, 32, 480, 480)
    cut = plate_ops.to_input(window.cut(image))
    assert cut.shape == (3, 480, 480)
    np.testing.assert_array_equal(cut, whole[:, 32:512, 64:544])


def test_windows_stay_inside_the_input() -> None:
    plan = _plan([[0, 0, 30, 20], [1250, 716, 1280, 736]])
    assert plan is not None and len(plan) == 2
    for window in plan:
        assert window.x >= 0 and window.x + window.width <= 1280
        assert window.y >= 0 and window.y + window.height <= 736
    for box in ([0, 0, 30, 20], [1250, 716, 1280, 736]):
        assert any(_covers(window, box) for window in plan)


def test_nearby_boxes_share_a_window_and_far_ones_do_not() -> None:
    near = _plan([[100, 200, 160, 260], [260, 300, 320, 330]])
    assert near is not None and len(near) == 1
    far = _plan([[100, 200, 160, 260], [1000, 400, 1060, 430]])
    assert far is not None and len(far) == 2
    for box in ([100, 200, 160, 260], [1000, 400, 1060, 430]):
        assert any(_covers(window, box) for window in far)


def test_a_margin_keeps_what_is_around_a_box_inside_its_window() -> None:
    plan = _plan([[600, 300, 660, 330]])
    assert plan is not None
    # The margin, less the half stride the grid may move the window by.
    margin = 480 * regions.FOCUS_MARGIN - regions.STRIDE / 2
    assert _covers(plan[0], [600 - margin, 300 - margin, 660 + margin, 330 + margin])


@pytest.mark.parametrize(
    ("focus", "why"),
    [
        ([], "no focus: nothing says where to look"),
        ([[100, 100, 600, 200]], "a box wider than a window"),
        ([[0, 0, 40, 40], [1200, 0, 1240, 40], [600, 690, 640, 730]], "three cost 0.73"),
    ],
)
def test_the_whole_frame_when_windows_do_not_pay(focus: list[list[float]], why: str) -> None:
    assert _plan(focus) is None, why


def test_no_more_windows_than_one_batch_of_the_region_detector() -> None:
    boxes = [[0, 0, 10, 10], [1260, 720, 1270, 730]]
    assert _plan(boxes, max_regions=1) is None
    assert _plan(boxes, max_regions=2) is not None


def test_an_input_no_larger_than_a_window_is_detected_whole() -> None:
    boxes = np.array([[10, 10, 50, 50]], np.float64)
    assert regions.plan_regions(boxes, (480, 480), REGION_HW, max_regions=4) is None
    assert regions.plan_regions(boxes, (480, 640), REGION_HW, max_regions=4) is None  # 0.75


@pytest.mark.parametrize(
    ("focus", "message"),
    [
        (np.zeros((2, 3)), "[K, 4]"),
        (np.array([[10, 10, 5, 20]]), "x2 >= x1"),
        (np.array([[np.nan, 0, 1, 1]]), "finite"),
    ],
)
def test_malformed_focus_is_refused_with_a_reason(focus: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        regions.validate_focus(focus)
