"""The update's heap mode: during an update, blocks of 256 KiB and more are mmapped (returned to the OS when
freed, so the update's peak resident memory is its live bytes); afterwards they come from the heap again."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from metaagent.train.local.models import UPDATE_MMAP_THRESHOLD, update_heap

LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]  # fmt: skip


pytestmark = pytest.mark.skipif(not hasattr(LIBC, "mallinfo2"), reason="needs glibc >= 2.33 (mallinfo2)")


def _mmapped_blocks() -> int:
    LIBC.mallinfo2.restype = _MallInfo2
    return LIBC.mallinfo2().hblks


def test_blocks_above_the_threshold_are_mmapped_only_during_the_update():
    size = 2 * UPDATE_MMAP_THRESHOLD  # above the update's threshold, far below the rollout's
    with update_heap():
        before = _mmapped_blocks()
        block = bytearray(size)
        assert _mmapped_blocks() == before + 1
        del block
        assert _mmapped_blocks() == before  # freed: its pages went back to the OS
    before = _mmapped_blocks()
    block = bytearray(size)
    assert _mmapped_blocks() == before  # after the update: from the heap
    del block
