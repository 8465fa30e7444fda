"""streamer.foundation.allocator: big buffers stay mapped, and go back to the system when freed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: In a fresh process (mallopt's effect is process-wide): malloc and free 4 MB, then malloc
#: 3 MB, and say whether the 3 MB are mapped (mallinfo2's hblkhd: bytes in mapped blocks).
_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util, sys
    from streamer.foundation.allocator import tune_allocator

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "tuned":
        assert tune_allocator()
    libc.free(libc.malloc(4 << 20))  # glibc raises its mmap threshold to 4 MB here
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(3 << 20)
    print(libc.mallinfo2().hblkhd - before >= 3 << 20)
    libc.free(block)
    """
)


def _mapped(mode: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_a_big_buffer_is_mapped_after_one_was_freed() -> None:
    # Untuned, glibc serves the second big buffer from its heap, where it fragments.
    assert not _mapped("plain")
    assert _mapped("tuned")
