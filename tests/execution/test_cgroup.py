"""Per-program memory cgroups (metaagent/execution/cgroup.py): finding this process's memory cgroup,
preparing cgroup v2's leaf layout (on a directory tree standing in for a cgroup file system), and, where
this machine lets us, the kernel stopping a process at its slot's limit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from metaagent.execution import cgroup

MOUNTINFO = (
    "30 24 0:26 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755\n"
    "35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 30 0:32 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "37 30 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V2_ONLY = "29 24 0:25 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n"


def test_own_cgroup_prefers_the_v1_memory_hierarchy():
    proc = "8:pids:/job\n4:memory:/job/run-1\n0::/\n"
    assert cgroup.own_cgroup(proc, MOUNTINFO) == (1, "/sys/fs/cgroup/memory/job/run-1")


def test_own_cgroup_on_a_pure_v2_system():
    assert cgroup.own_cgroup("0::/user.slice/trainer.scope\n", V2_ONLY) == (
        2,
        "/sys/fs/cgroup/user.slice/trainer.scope",
    )
    assert cgroup.own_cgroup("0::/\n", "") is None  # nothing mounted


def _fake_v2(tmp_path, controllers="cpu memory pids", subtree="", procs=""):
    root = tmp_path / "cg"
    root.mkdir()
    for name, text in (("cgroup.controllers", controllers), ("cgroup.subtree_control", subtree),
                       ("cgroup.procs", procs)):  # fmt: skip
        (root / name).write_text(text)
    return root


def test_v2_alone_in_its_cgroup_moves_into_a_leaf_then_enables_memory(tmp_path):
    root = _fake_v2(tmp_path, procs="4242\n")
    assert cgroup.prepare_root(2, str(root), 4242) == cgroup.CgroupRoot(2, str(root))
    assert (root / "metaagent-host-4242" / "cgroup.procs").read_text() == "0"
    assert (root / "cgroup.subtree_control").read_text() == "+memory"


def test_v2_with_memory_already_enabled_below_is_used_as_it_is(tmp_path):
    root = _fake_v2(tmp_path, subtree="memory pids", procs="")
    assert cgroup.prepare_root(2, str(root), 4242).path == str(root)
    assert not (root / "metaagent-host-4242").exists()


@pytest.mark.parametrize(
    "controllers, procs, message",
    [("cpu memory", "1\n4242\n", "holds other processes"), ("cpu pids", "4242\n", "no memory controller")],
)
def test_v2_without_a_usable_layout_says_why(tmp_path, controllers, procs, message):
    root = _fake_v2(tmp_path, controllers=controllers, procs=procs)
    with pytest.raises(cgroup.CgroupError, match=message):
        cgroup.prepare_root(2, str(root), 4242)
    assert (root / "cgroup.subtree_control").read_text() == ""  # nothing changed


def test_v1_limits_are_written_in_the_order_the_kernel_accepts(tmp_path):
    slots = cgroup.Slots(cgroup.CgroupRoot(1, str(tmp_path)))
    slot = tmp_path / f"metaagent-{os.getpid()}-0"
    slot.mkdir()
    writes = []
    real_write = cgroup._write
    (slot / "memory.limit_in_bytes").write_text(str(1 << 30))
    (slot / "memory.memsw.limit_in_bytes").write_text(str(1 << 30))
    (slot / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    try:
        cgroup._write = lambda path, text: (writes.append(os.path.basename(path)), real_write(path, text))
        path, kills = slots.acquire(256 << 20)  # lower: memory first, then memory+swap
        assert (path, kills) == (str(slot), 3)
        slots.release(path, kills)
        (slot / "memory.limit_in_bytes").write_text(str(256 << 20))
        slots.acquire(2 << 30)  # higher: memory+swap first
    finally:
        cgroup._write = real_write
        slots.remove_all()
    assert writes == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"] * 1 + [
        "memory.memsw.limit_in_bytes",
        "memory.limit_in_bytes",
    ]


@pytest.mark.skipif(cgroup.probe()[0] is None, reason=f"no memory cgroups here: {cgroup.probe()[1]}")
def test_the_kernel_stops_a_process_at_its_slot_limit():
    """Memory RLIMIT_AS cannot see (it would allow this allocation) ends at the slot's limit."""
    slots = cgroup.probe()[0]
    slot, kills = slots.acquire(64 << 20)
    procs = os.path.join(slot, "cgroup.procs")
    program = f"open({procs!r}, 'w').write('0')\nx = bytearray(256 << 20)\nprint('ok')"
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    finally:
        killed = slots.release(slot, kills)
    assert proc.returncode == -9 and "ok" not in proc.stdout
    assert killed
