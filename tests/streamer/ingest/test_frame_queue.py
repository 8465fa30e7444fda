"""streamer.ingest.frame_queue: a real producer thread against the asyncio consumer, no mocks."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from streamer.domain.frames import Frame
from streamer.ingest.frame_queue import FrameQueue


def _frame(index: int) -> Frame:
    return Frame(
        camera="cam",
        index=index,
        pts_s=index / 15,
        wall_time=time.time(),
        monotonic=time.monotonic(),
        pixels=np.zeros((2, 2, 3), np.uint8),
    )


def _in_thread(target, *args) -> tuple[threading.Thread, list]:  # type: ignore[no-untyped-def]
    result: list = []
    thread = threading.Thread(target=lambda: result.append(target(*args)), daemon=True)
    thread.start()
    return thread, result


@pytest.mark.parametrize(
    ("maxsize", "policy", "message"),
    [(0, "wait", "maxsize must be >= 1"), (2, "newest", "policy must be one of")],
)
def test_rejects_bad_arguments(maxsize: int, policy: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FrameQueue(maxsize, policy)  # type: ignore[arg-type]


async def test_drop_oldest_never_blocks_counts_drops_and_keeps_newest() -> None:
    queue = FrameQueue(2, "drop_oldest")
    stop = threading.Event()
    started = time.monotonic()
    thread, results = _in_thread(lambda: [queue.put_threadsafe(_frame(i), stop) for i in range(5)])
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - started < 1
    assert results == [[True] * 5]
    assert queue.dropped == 3 and queue.qsize() == 2
    assert [(await queue.get()).index for _ in range(2)] == [3, 4]  # type: ignore[union-attr]


async def test_wait_blocks_until_room_and_drops_nothing() -> None:
    queue = FrameQueue(1, "wait")
    stop = threading.Event()
    assert queue.put_threadsafe(_frame(0), stop)
    thread, results = _in_thread(queue.put_threadsafe, _frame(1), stop)
    await asyncio.sleep(0.2)
    assert thread.is_alive(), "a put into a full 'wait' queue must block"
    first = await queue.get()
    thread.join(2)
    assert results == [True]
    second = await queue.get()
    assert first is not None and second is not None
    assert (first.index, second.index, queue.dropped) == (0, 1, 0)


async def test_wait_is_released_by_stop() -> None:
    queue = FrameQueue(1, "wait")
    stop = threading.Event()
    queue.put_threadsafe(_frame(0), stop)
    thread, results = _in_thread(queue.put_threadsafe, _frame(1), stop)
    await asyncio.sleep(0.1)
    assert thread.is_alive()
    released = time.monotonic()
    stop.set()
    queue.wake_producers()
    thread.join(2)
    assert results == [False] and time.monotonic() - released < 0.2
    assert queue.qsize() == 1 and queue.dropped == 0


async def test_wait_rechecks_stop_even_without_a_wake() -> None:
    queue = FrameQueue(1, "wait")
    stop = threading.Event()
    queue.put_threadsafe(_frame(0), stop)
    thread, results = _in_thread(queue.put_threadsafe, _frame(1), stop)
    await asyncio.sleep(0.05)
    stop.set()
    thread.join(2)
    assert results == [False]


async def test_close_releases_a_blocked_producer_and_refuses_later_puts() -> None:
    queue = FrameQueue(1, "wait")
    stop = threading.Event()
    queue.put_threadsafe(_frame(0), stop)
    thread, results = _in_thread(queue.put_threadsafe, _frame(1), stop)
    await asyncio.sleep(0.1)
    queue.close()
    thread.join(2)
    assert results == [False]
    assert not queue.put_threadsafe(_frame(2), stop)
    assert queue.closed


async def test_consumer_is_woken_by_a_thread_put_and_close() -> None:
    queue = FrameQueue(4, "drop_oldest")
    stop = threading.Event()

    def produce() -> None:
        for i in range(3):
            time.sleep(0.05)
            queue.put_threadsafe(_frame(i), stop)
        time.sleep(0.05)
        queue.close()

    thread = threading.Thread(target=produce)
    thread.start()
    got = []
    async with asyncio.timeout(3):
        while (frame := await queue.get()) is not None:
            got.append(frame.index)
    thread.join(2)
    assert got == [0, 1, 2]
    assert await queue.get() is None  # stays ended


async def test_close_drains_queued_frames_first() -> None:
    queue = FrameQueue(3, "wait")
    stop = threading.Event()
    for i in range(3):
        queue.put_threadsafe(_frame(i), stop)
    queue.close()
    got = [await queue.get() for _ in range(4)]
    assert [f.index if f else None for f in got] == [0, 1, 2, None]


async def test_a_cancelled_get_does_not_swallow_the_next_frame() -> None:
    queue = FrameQueue(2, "drop_oldest")
    stop = threading.Event()
    waiter = asyncio.create_task(queue.get(), name="cancelled-get")
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert queue._waiters == []
    thread, _ = _in_thread(queue.put_threadsafe, _frame(7), stop)
    thread.join(2)
    async with asyncio.timeout(1):
        frame = await queue.get()
    assert frame is not None and frame.index == 7


async def test_two_consumers_share_the_frames() -> None:
    queue = FrameQueue(8, "wait")
    stop = threading.Event()
    got: list[int] = []

    async def consume() -> None:
        while (frame := await queue.get()) is not None:
            got.append(frame.index)

    consumers = [asyncio.create_task(consume(), name=f"consumer-{i}") for i in range(2)]
    await asyncio.sleep(0.05)

    def produce() -> None:
        for i in range(20):
            queue.put_threadsafe(_frame(i), stop)
        queue.close()

    thread = threading.Thread(target=produce)
    thread.start()
    async with asyncio.timeout(3):
        await asyncio.gather(*consumers)
    thread.join(2)
    assert sorted(got) == list(range(20))


def _moved(index: int, focus: np.ndarray | None) -> Frame:
    frame = _frame(index)
    return Frame(
        frame.camera, index, frame.pts_s, frame.wall_time, frame.monotonic, frame.pixels, focus
    )


async def test_a_dropped_frame_hands_its_focus_to_the_frame_that_replaces_it() -> None:
    """What moved in a frame the camera never sends is still looked at in the one it does."""
    queue = FrameQueue(1, "drop_oldest")
    stop = threading.Event()
    boxes = [np.array([[i, i, i + 1, i + 1]], np.float32) for i in range(3)]
    for index, box in enumerate(boxes):
        queue.put_threadsafe(_moved(index, box), stop)
    sent = queue.poll()
    assert sent is not None and sent.index == 2 and queue.dropped == 2
    assert sent.focus is not None and sorted(sent.focus[:, 0]) == [0, 1, 2]
    # A dropped frame that looked everywhere (None) makes its replacement look everywhere.
    queue.put_threadsafe(_moved(3, None), stop)
    queue.put_threadsafe(_moved(4, boxes[0]), stop)
    replaced = queue.poll()
    assert replaced is not None and replaced.index == 4 and replaced.focus is None


async def test_ready_waits_for_a_frame_without_taking_it() -> None:
    queue = FrameQueue(1, "drop_oldest")
    stop = threading.Event()
    waiting = asyncio.create_task(queue.ready())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    thread, _ = _in_thread(queue.put_threadsafe, _frame(7), stop)
    thread.join(2)
    assert await asyncio.wait_for(waiting, 2) is True
    assert queue.qsize() == 1  # still queued: poll() takes it
    assert (frame := queue.poll()) is not None and frame.index == 7
    queue.close()
    assert await asyncio.wait_for(queue.ready(), 2) is False
