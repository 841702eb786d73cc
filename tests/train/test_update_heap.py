"""The update's heap mode: during an update, blocks of 256 KiB and more that the heap cannot serve from its free
space are mmapped (returned to the OS when freed, so the update's peak resident memory is its live bytes, not the
heap's high-water mark); afterwards they extend the heap again.

Checked in a fresh interpreter: a process that has run other tests may hold a free heap chunk large enough for the
probe, which glibc serves from the heap whatever the threshold."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

PROBE = """
import ctypes, ctypes.util
from metaagent.train.local.models import UPDATE_MMAP_THRESHOLD, update_heap

libc = ctypes.CDLL(ctypes.util.find_library("c"))
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
blocks = lambda: libc.mallinfo2().hblks
size = 8 * UPDATE_MMAP_THRESHOLD  # above the update's threshold, below the rollout's (32 MiB)
warm = bytearray(16 << 20); del warm  # as after a rollout: glibc's dynamic threshold rises to 16 MiB
with update_heap():
    before = blocks(); block = bytearray(size); inside = blocks() - before
    del block; freed = blocks() - before
before = blocks(); block = bytearray(size); after = blocks() - before
print(inside, freed, after)
"""


def _has_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "mallinfo2")


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc >= 2.33 (mallinfo2)")
def test_blocks_above_the_threshold_are_mmapped_only_during_the_update():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    inside, freed, after = map(int, out.split())
    assert (inside, freed) == (1, 0)  # mmapped during the update, and unmapped the moment it is freed
    assert after == 0  # after the update: from the heap
