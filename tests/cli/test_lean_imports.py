"""A one-command `surrogate predict` process loads LightGBM without scikit-learn and predicts
exactly what the library predicts; in-process callers keep LightGBM whole."""

from __future__ import annotations

import json
import subprocess
import sys

from surrogate.cli import lean_imports
from surrogate.config.layout import ClusterConfig, LayoutConfig
from surrogate.config.presets import get_preset
from surrogate.config.training import TrainingConfig
from surrogate.prediction.predict import predict

ARGS = [
    "predict",
    "--model",
    "8b",
    "--gpu",
    "H100-SXM-80GB",
    "--nodes",
    "4",
    "--dp",
    "8",
    "--tp",
    "4",
    "--pp",
    "1",
    "--mbs",
    "2",
    "--grad-accum",
    "16",
    "--zero",
    "1",
    "--json",
    "--framework",
    "nanotron",
]
SCRIPT = (
    "import sys; from surrogate.cli import entry; sys.argv = ['surrogate', *sys.argv[1:]]\n"
    "import atexit; atexit.register(lambda: print('SKLEARN', 'sklearn' in sys.modules, "
    "file=sys.stderr))\nentry()"
)


def test_console_predict_skips_sklearn_and_agrees_with_the_library():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *ARGS], capture_output=True, text=True, check=True
    )
    assert "SKLEARN False" in done.stderr
    cfg = TrainingConfig(
        model=get_preset("8b"),
        cluster=ClusterConfig(num_nodes=4),
        layout=LayoutConfig(framework="nanotron", dp=8, tp=4, mbs=2, grad_accum=16, zero_stage=1),
    )
    assert json.loads(done.stdout)["mfu"] == predict(cfg).mfu


def test_in_process_callers_are_left_alone():
    assert lean_imports.ONE_COMMAND_PROCESS is False
    lean_imports.import_lightgbm_for_prediction()  # a no-op here
    import lightgbm

    assert lightgbm.LGBMRegressor().get_params()  # the scikit-learn estimator is whole
