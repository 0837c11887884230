"""surrogate.progress: nothing drawn where stderr is not a terminal, or when disabled."""

from __future__ import annotations

import pytest

from surrogate.progress import bars, report


def test_bars_draw_nothing_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with bars() as progress:  # pytest's stderr is not a terminal
        progress("stage", 0, 2)
        progress("stage", 2, 2)
    with bars(enabled=False) as progress:
        progress("stage", 1, 0)
    report(None, "stage", 1, 1)  # no listener: nothing happens
    assert capsys.readouterr() == ("", "")


def test_bars_on_a_terminal_keep_stdout_clean(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FORCE_TERMINAL", "1")
    with bars() as progress:
        progress("scoring", 0, 3)
        progress("scoring", 3, 3)
        progress("unknown length", 1, 0)
    assert capsys.readouterr().out == ""  # the answer's stream is left alone
