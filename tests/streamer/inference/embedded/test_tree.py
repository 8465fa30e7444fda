"""streamer.inference.embedded.tree: the wheel's server tree, copied once and atomically."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.tree import prepare_server_tree


def test_prepare_server_tree_is_atomic_and_reused(tmp_path: Path) -> None:
    target = tmp_path / "tree"
    results: list[Path] = []
    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            results.append(prepare_server_tree(target))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == [target.absolute()] * 3
    assert os.access(target / "bin" / "tritonserver", os.X_OK)
    assert os.access(target / "backends" / "python" / "triton_python_backend_stub", os.X_OK)
    assert not (target / "python_backend_stubs").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["tree"]  # no temporary siblings left

    marker = next(target.glob(".lpr-streamer-tree"))
    before = marker.stat().st_mtime_ns
    assert prepare_server_tree(target) == target.absolute()
    assert marker.stat().st_mtime_ns == before

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a server tree")
    with pytest.raises(TritonStartError, match="does not hold"):
        prepare_server_tree(foreign)
    assert (foreign / "notes.txt").exists()
