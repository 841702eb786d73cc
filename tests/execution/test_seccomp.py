"""The seccomp filter's tables (metaagent/execution/_confine.py): system call numbers as the kernel's uapi
headers define them, and every name the rules use known on both architectures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from metaagent.execution import _confine

#: where distributions install the uapi headers (linux-libc-dev): x86_64 and the generic table (aarch64)
HEADERS = {
    0: ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    1: ["/usr/include/asm-generic/unistd.h"],
}


def _numbers(column: int) -> dict[str, int]:
    path = next((Path(p) for p in HEADERS[column] if Path(p).is_file()), None)
    if path is None:
        pytest.skip(f"no kernel headers at {HEADERS[column]}")
    # the generic table names calls with 32- and 64-bit variants __NR3264_<name> (fcntl, lseek, mmap ...)
    pattern = r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b"
    return {m[1]: int(m[2]) for m in re.finditer(pattern, path.read_text())}


@pytest.mark.parametrize("column, arch", [(0, "x86_64"), (1, "aarch64")])
def test_syscall_numbers_match_the_kernel_headers(column, arch):
    headers = _numbers(column)
    table = {name: numbers[column] for name, numbers in _confine.SYSCALLS.items()}
    wrong = {name: (number, headers.get(name)) for name, number in table.items() if number != headers.get(name)}
    assert wrong == {}, f"{arch}: (table, header) differ"
    assert max(headers.values()) >= _confine.LAST_AUDITED


def test_every_rule_names_a_known_syscall_once():
    denied = [n for names in _confine.DENIED.values() for n in names]
    assert len(denied) == len(set(denied))
    assert set(denied) <= set(_confine.SYSCALLS) and set(_confine.ARG_RULES) <= set(_confine.SYSCALLS)
    assert not set(denied) & set(_confine.ARG_RULES)
    for name in _confine.ARG_RULES:  # an argument rule must exist on both architectures
        assert None not in _confine.SYSCALLS[name], name
    assert max(n for nums in _confine.SYSCALLS.values() for n in nums if n is not None) <= _confine.LAST_AUDITED


def test_the_filter_program_fits_classic_bpf():
    prog = _confine._seccomp_program(1234)
    assert len(prog) < 4096 and all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in prog)
    assert prog[-1] == (0x06, 0, 0, 0x7FFF0000)  # anything not named is allowed


def _run_bpf(prog, nr, args=(0,) * 6):
    """What the filter returns for system call ``nr`` with ``args`` (the opcodes it uses; low 32 bits)."""
    data = {0: nr, 4: _confine.AUDIT_ARCH, **{16 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == 0x20:
            acc = data[k]
        elif code == 0x54:
            acc &= k
        elif code in (0x15, 0x35, 0x45):
            taken = acc == k if code == 0x15 else (acc >= k if code == 0x35 else bool(acc & k))
            pc += jt if taken else jf
        elif code == 0x06:
            return "allow" if k == 0x7FFF0000 else ("EPERM" if k == 0x00050001 else hex(k))


@pytest.mark.skipif(_confine.AUDIT_ARCH is None, reason="no filter on this architecture")
def test_the_command_rules_refuse_only_the_named_commands():
    pid, other = 1234, 999
    prog = _confine._seccomp_program(pid)
    fcntl, ioctl, nr = _confine.NR["fcntl"], _confine.NR["ioctl"], _confine.NR
    assert _run_bpf(prog, fcntl, (3, _confine.F_SETOWN, other)) == "EPERM"
    assert _run_bpf(prog, fcntl, (3, _confine.F_SETOWN, -other)) == "EPERM"
    assert _run_bpf(prog, fcntl, (3, _confine.F_SETOWN, pid)) == "allow"
    assert _run_bpf(prog, fcntl, (3, _confine.F_SETOWN, 0)) == "allow"
    for command in (_confine.F_SETOWN_EX, _confine.F_SETLEASE, _confine.F_NOTIFY):
        assert _run_bpf(prog, fcntl, (3, command, pid)) == "EPERM"
    assert _run_bpf(prog, fcntl, (3, 4, 0o4000)) == "allow"  # F_SETFL O_NONBLOCK and every other command
    assert _run_bpf(prog, ioctl, (3, _confine.FIOSETOWN, 0)) == "EPERM"
    assert _run_bpf(prog, ioctl, (3, _confine.SIOCSPGRP, 0)) == "EPERM"
    assert _run_bpf(prog, ioctl, (3, 0x5401, 0)) == "allow"  # TCGETS (isatty)
    assert _run_bpf(prog, nr["inotify_init1"]) == _run_bpf(prog, nr["fanotify_mark"]) == "EPERM"
    assert _run_bpf(prog, nr["kill"], (other, 9)) == "EPERM"
    assert _run_bpf(prog, nr["kill"], (pid, 9)) == "allow"
