"""A mistyped flag is refused in one line that names the close known flag (difflib), exit code 2."""

from __future__ import annotations

import pytest

from metaagent.cli.train import build_parser


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_typo_in_a_flag_gets_the_close_flag(capsys):
    err = _error(capsys, ["--stage-lenn", "1"])
    assert "unrecognized arguments: --stage-lenn; did you mean --stage-len? (see" in err
    assert len(err.strip().splitlines()) == 1
    err = _error(capsys, ["--rollout.m-desings=2", "--data.bach-size", "2"])
    assert "--rollout.m-designs (for --rollout.m-desings)" in err
    assert "--data.batch-size (for --data.bach-size)" in err


def test_a_flag_like_no_other_gets_no_guess(capsys):
    err = _error(capsys, ["--zzzzzzzz"])
    assert "unrecognized arguments: --zzzzzzzz (see" in err and "did you mean" not in err
