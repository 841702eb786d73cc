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
    return {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", path.read_text())}


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
