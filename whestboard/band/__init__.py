"""The Monte Carlo convergence band: the measurement kernel, its files, the white-box baselines, the view.

Owns: one Monte Carlo pass per MLP on its own stream, checkpointed at 2^k, 10% of B and B (the
kernel), the band's files beside a dataset, mean and covariance propagation scored on the same MLPs,
and the plain view the convergence and leaderboard figures are drawn from. May import:
``whestboard.scoring``, ``whestboard.data``, ``whestboard.rules``, ``whestboard.store``,
``whestboard.config``.
"""

from whestboard.band import baselines, measure, store, view
from whestboard.band.measure import BandError
from whestboard.band.store import compute_band, load_band
from whestboard.band.view import (
           ConvergenceView,
           RunPoint,
           band_frame,
           cached_convergence_view,
           convergence_view,
)

__all__ = ["BandError", "ConvergenceView", "RunPoint", "band_frame", "baselines", "cached_convergence_view",
           "compute_band", "convergence_view", "load_band", "measure", "store", "view"]
