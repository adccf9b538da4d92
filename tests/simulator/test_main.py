"""``python -m simulator``: its command line."""

from __future__ import annotations

import pytest

from simulator.__main__ import main


def test_help_names_the_command_and_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    out = capsys.readouterr().out
    assert caught.value.code == 0
    assert out.startswith("usage: python -m simulator")
    assert "--profile" in out and "--model" in out and "--port" in out


def test_a_bad_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--profile", "no-such-profile"])
    assert caught.value.code == 2 and "no-such-profile" in capsys.readouterr().err
