"""The CLI under bad, hostile and concurrent input (``robustness.py`` beside this file, with
``--quick``): no traceback, hang, silent wrong answer or row lost. Minutes, so marked ``fuzz``
and left out of the default run: ``python -m pytest -m fuzz``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("robustness.py")


@pytest.mark.fuzz
def test_every_hostile_input_is_refused_in_one_line_or_answered_sanely() -> None:
    done = subprocess.run(
        [sys.executable, str(HARNESS), "--quick", "--show", "20"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
