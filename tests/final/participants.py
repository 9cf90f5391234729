"""A small round and four participant packages as teams ship them, for the final's tests and benchmark.

The round is 16 x 3 (shape small enough to score in the sandbox in well under a second) with gated
residual time and no wall-time price (C = F), so effective compute is a FLOP count and two copies of
one estimator cost exactly the same. Participants import only what Phase 2's grader allows
(``whestbench``, ``flopscope``), as real packages do.
"""

from __future__ import annotations

from pathlib import Path

from whestbench.budget import ROUNDS, RoundConfig
from whestbench.packaging import package_submission

from whestboard.rules import ALL_ROUNDS, Round

SMALL_ROUND = "t-final-16x3"


def small_round_config(width: int = 16, depth: int = 3, tag: str = SMALL_ROUND) -> RoundConfig:
    return RoundConfig(tag=tag, width=width, depth=depth, n_samples=10_000, flop_budget=10**8,
                       lambda_flops_per_second=0.0, residual_wall_time_limit_s=30.0, wall_time_limit_s=60.0,
                       residual_mode="gated", dtype_aware_billing=True,
                       note="a small test round: gated residual time, C = F")


def register_round(monkeypatch, cfg: RoundConfig) -> None:
    """Make ``cfg`` a round this process knows (whestbench's table and whestboard's view of it)."""
    monkeypatch.setitem(ROUNDS, cfg.tag, cfg)
    monkeypatch.setitem(ALL_ROUNDS, cfg.tag, Round(cfg))


MEAN = '''"""Mean propagation, as a participant would submit the tutorial baseline."""
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    pass
'''

COVARIANCE = '''"""Covariance propagation, shipped as a folder with a helper module."""
from helper import Covariance


class Estimator(Covariance):
    pass
'''

HELPER = '''from whestbench.estimators import CovariancePropagationEstimator as Covariance
'''

FLAKY = '''"""Mean propagation that raises on every MLP whose estimator seed is even."""
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        if mlp.seed % 2 == 0:
            raise RuntimeError("this estimator fails on even seeds")
        return super().predict(mlp, budget)
'''


def write_packages(root: Path) -> dict[str, Path]:
    """The four nominees: a lone file, a folder, a ``whest package`` tarball of that folder, a flaky file."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "mean.py").write_text(MEAN)
    folder = root / "covariance"
    folder.mkdir(exist_ok=True)
    (folder / "estimator.py").write_text(COVARIANCE)
    (folder / "helper.py").write_text(HELPER)
    tarball = package_submission(folder, output_path=root / "covariance-copy.tar.gz")
    (root / "flaky.py").write_text(FLAKY)
    return {"mean": root / "mean.py", "covariance": folder, "copycat": Path(tarball), "flaky": root / "flaky.py"}
