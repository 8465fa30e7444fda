"""The C allocator's settings for a process that passes many large, short-lived buffers.

Every camera's decoder and the frames on their way to Triton allocate and free buffers of
3 MB (a 1080p YUV picture) to 6 MB, from a dozen threads. glibc's ``malloc`` serves an
allocation over its mmap threshold with ``mmap`` and gives it back on ``free``, but the first
such ``free`` raises the threshold to that size (up to 32 MB), after which these buffers come
from the per-thread heaps (up to 8 per core), where fragmentation keeps them: the service's
memory grows with cameras well past what they hold. Fixing the threshold at 1 MiB and the
heaps at 2 keeps big buffers in ``mmap`` and returns them on ``free``
(``python -m bench.overload_memory``: 16 cameras, 1,090 -> 920 MiB). Set here, at start,
rather than with ``MALLOC_*`` variables, so every way of starting the service has it; no
library exposes ``mallopt``, hence ctypes. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

LOG = logging.getLogger(__name__)

#: glibc's mallopt parameters (malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Allocations from this size on are mapped, and unmapped on free (fixed: no dynamic rise).
MMAP_THRESHOLD_BYTES = 1 << 20
#: At most this many heaps for all threads.
ARENA_MAX = 2


def tune_allocator() -> bool:
    """Apply the settings above to this process; True where glibc took them. Call it before
    the threads start (arenas already made stay)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    taken = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    taken = mallopt(M_ARENA_MAX, ARENA_MAX) == 1 and taken
    if not taken:
        LOG.debug("mallopt refused the allocator settings")
    return taken
