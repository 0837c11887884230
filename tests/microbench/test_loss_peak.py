"""The loss's bytes per logit: measured in a fresh process, and the committed records, against
the value the analytic model states (UNFUSED_CE_LOGIT_BYTES)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.loss_peak import SCHEMA, measure
from surrogate.config.framework_traits import UNFUSED_CE_LOGIT_BYTES

RECORDS = Path(__file__).resolve().parents[2] / "datasets/loss_peak/2026-12-02/cpu.jsonl"


def test_the_unfused_cross_entropy_keeps_twelve_bytes_a_logit():
    """torchtitan's loss, its logits deleted before the backward: 12 bytes per logit at the
    peak (4 fp32 log-softmax saved + 4 incoming gradient + 4 outgoing), not the 16 of every
    copy at once."""
    record = measure(2048, 16384)
    assert record["schema"] == SCHEMA
    assert record["bytes_per_logit"] == pytest.approx(UNFUSED_CE_LOGIT_BYTES, rel=0.01)


def test_the_committed_records_agree_with_the_stated_value():
    records = [json.loads(line) for line in RECORDS.read_text().splitlines()]
    assert len(records) == 3 and all(r["fingerprint"]["gpu_name"] == "cpu" for r in records)
    for r in records:
        assert r["bytes_per_logit"] == pytest.approx(UNFUSED_CE_LOGIT_BYTES, rel=0.01)
