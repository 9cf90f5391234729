"""The Monte Carlo convergence band: the measurement kernel, its files, the white-box baselines, the view.

Owns: one Monte Carlo pass per MLP on its own stream, checkpointed at 2^k, 10% of B and B (the
kernel), the band's files beside a dataset, mean and covariance propagation scored on the same MLPs,
the plain view the convergence and leaderboard figures are drawn from, and the paper's figure (cumulant
propagation's MSE / Var against FLOPs beside sampling's 1 / m, ``_paper``). May import:
``whestboard.scoring``, ``whestboard.data``, ``whestboard.rules``, ``whestboard.store``,
``whestboard.config``.
"""

from whestboard.band._baselines import (
    BASELINE_LABELS,
    baselines_cost,
    compute_baselines,
    load_baselines,
    missing_baselines,
)
from whestboard.band._folder import compute_band, load_band
from whestboard.band._measure import (
    DEFAULT_MAX_BUDGET_MULTIPLE,
    BandError,
    band_rng,
    checkpoint_means,
    make_plan,
)
from whestboard.band._paper import (
    DEFAULT_N_REF,
    PAPER_DEPTH,
    PAPER_WIDTHS,
    PaperPoint,
    PaperShape,
    PaperView,
    measure_paper_shape,
    measure_round_shape,
    paper_view,
    sampling_line,
)
from whestboard.band._view import (
    ConvergenceView,
    RunPoint,
    band_frame,
    cached_convergence_view,
    convergence_view,
)

__all__ = [
    "band_frame",
    "band_rng",
    "BandError",
    "BASELINE_LABELS",
    "baselines_cost",
    "cached_convergence_view",
    "checkpoint_means",
    "compute_band",
    "compute_baselines",
    "convergence_view",
    "ConvergenceView",
    "DEFAULT_MAX_BUDGET_MULTIPLE",
    "DEFAULT_N_REF",
    "load_band",
    "load_baselines",
    "make_plan",
    "measure_paper_shape",
    "measure_round_shape",
    "missing_baselines",
    "PAPER_DEPTH",
    "PAPER_WIDTHS",
    "paper_view",
    "PaperPoint",
    "PaperShape",
    "PaperView",
    "RunPoint",
    "sampling_line",
]
