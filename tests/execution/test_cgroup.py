"""Per-program memory cgroups (metaagent/execution/cgroup.py): finding this process's memory cgroup,
preparing cgroup v2's leaf layout (on a directory tree standing in for a cgroup file system), and, where
this machine lets us, the kernel stopping a process at its slot's limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
        assert (path, kills) == (cgroup.Slot(str(slot)), 3)
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
    procs = os.path.join(slot.path, "cgroup.procs")
    program = f"open({procs!r}, 'w').write('0')\nx = bytearray(256 << 20)\nprint('ok')"
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    finally:
        killed = slots.release(slot, kills)
    assert proc.returncode == -9 and "ok" not in proc.stdout
    assert killed


def test_own_cgroup_finds_the_pids_controller_too():
    proc = "8:pids:/job\n4:memory:/job/run-1\n0::/\n"
    assert cgroup.own_cgroup(proc, MOUNTINFO, "pids") == (1, "/sys/fs/cgroup/pids/job")
    assert cgroup.own_cgroup("0::/trainer.scope\n", V2_ONLY, "pids") == (2, "/sys/fs/cgroup/trainer.scope")


def test_v2_enables_pids_beside_memory_in_the_same_slots(tmp_path):
    root = _fake_v2(tmp_path, procs="4242\n")
    cgroup.prepare_root(2, str(root), 4242)
    (root / "cgroup.procs").write_text("")  # the kernel moved us into the leaf
    (root / "cgroup.subtree_control").write_text("memory")
    assert cgroup.prepare_root(2, str(root), 4242, "pids").path == str(root)
    assert (root / "cgroup.subtree_control").read_text() == "+pids"
    slots = cgroup.Slots(cgroup.CgroupRoot(2, str(root)), cgroup.CgroupRoot(2, str(root)))
    (root / f"metaagent-{os.getpid()}-0").mkdir()
    (root / f"metaagent-{os.getpid()}-0" / "memory.events").write_text("oom_kill 0\n")
    try:
        slot, _ = slots.acquire(256 << 20, 100)
        assert slot.tasks == slot.path and (Path(slot.path) / "pids.max").read_text() == "100"
        assert (Path(slot.path) / "memory.max").read_text() == str(256 << 20)
    finally:
        slots.remove_all()


def test_v1_slots_have_a_directory_in_each_hierarchy(tmp_path):
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    memory.mkdir(), pids.mkdir()
    slots = cgroup.Slots(cgroup.CgroupRoot(1, str(memory)), cgroup.CgroupRoot(1, str(pids)))
    name = f"metaagent-{os.getpid()}-0"
    (memory / name).mkdir()
    for file, text in (("memory.limit_in_bytes", str(1 << 30)), ("memory.oom_control", "oom_kill 0\n")):
        (memory / name / file).write_text(text)
    entered = []
    real_write = cgroup._write
    try:
        slot, _ = slots.acquire(256 << 20, 50)
        assert slot == cgroup.Slot(str(memory / name), str(pids / name))
        assert (pids / name / "pids.max").read_text() == "50"
        cgroup._write = lambda path, text: entered.append((path, text))
        cgroup.enter(slot, 77)
    finally:
        cgroup._write = real_write
        slots.remove_all()
    assert entered == [(str(memory / name / "cgroup.procs"), "77"), (str(pids / name / "cgroup.procs"), "77")]
