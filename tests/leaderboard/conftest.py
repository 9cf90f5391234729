"""Fixtures the leaderboard modules share: a real ``whest run --json`` report, run once a session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ESTIMATOR = '''
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    """Mean propagation, written as a participant's file."""
'''


@pytest.fixture(scope="session")
def run_report(tmp_path_factory, preloaded) -> Path:
    """``whest run --json`` exactly as a participant runs it: 2 MLPs at the graded shape, its defaults (in a
    process of its own, forked: tests/preloaded.py). Read-only for the tests: each writes its variants to a
    folder of its own.

    100 ground-truth samples per MLP instead of the default 200,000: they only set how closely the report's
    reference means are estimated, and every test reads the numbers the report states, not their accuracy.
    """
    folder = tmp_path_factory.mktemp("whest-run")
    (folder / "estimator.py").write_text(ESTIMATOR)
    out = folder / "report.json"
    run = preloaded.start("whest", "run", "--json", "--estimator", "estimator.py", "--runner", "local", "--n-mlps",
                          "2", "--n-samples", "100", "--seed", "7", cwd=folder,
                          env=dict(os.environ, HF_DATASETS_OFFLINE="1"))
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-2000:]
    out.write_text(stdout)
    return out
