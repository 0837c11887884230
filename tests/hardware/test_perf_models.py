"""Which hardware model answers: a profile by name or path, the GPU's default, the datasheet;
a profile of another GPU is refused."""

from __future__ import annotations

import pytest

from surrogate.analytic.perf import SpecPerfModel
from surrogate.errors import ConfigError
from surrogate.hardware.perf_models import resolve_perf_model


def test_a_profile_by_name_the_default_and_the_datasheet() -> None:
    assert resolve_perf_model("H100", "hf-playbook-cluster").name.startswith("hf-playbook-cluster")
    assert resolve_perf_model("H100-SXM-80GB").name.startswith("H100-SXM-80GB")
    assert isinstance(resolve_perf_model("A100-80GB"), SpecPerfModel)


def test_a_profile_of_another_gpu_is_refused() -> None:
    with pytest.raises(
        ConfigError, match="measured on H100-SXM-80GB, but the configuration runs on A100-SXM-80GB"
    ):
        resolve_perf_model("A100-80GB", "hf-playbook-cluster")
