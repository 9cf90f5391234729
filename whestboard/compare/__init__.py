"""Two estimators side by side: a paired, noise-aware verdict on their shared MLPs, and where the error comes from.

Owns: the paired statistics (mean paired differences of scores and final-layer MSEs with bootstrap
intervals, the geometric-mean ratio, wins and losses, the sign-flip test, MLPs needed), the split of the
MSE interval into reference noise and MLP-to-MLP spread, the error anatomy (per layer, by neuron type,
by |true mean|, worst neurons, one MLP's heatmap), and loading the sides compared (runs, submissions
with per-MLP results, baselines, ``score --json`` reports). May import: ``whestboard.leaderboard``,
``whestboard.band``, ``whestboard.scoring``, ``whestboard.data``, ``whestboard.rules``, ``whestboard.store``,
``whestboard.config``.
"""

from whestboard.compare import anatomy, comparison, paired, sides
from whestboard.compare.comparison import anatomy_inputs, anatomy_of, dataset_of, heatmap_of, verdict
from whestboard.compare.sides import (
           ID_HELP,
           CompareError,
           Side,
           candidates,
           load_report_file,
           load_side,
           resolve_side,
)

__all__ = ["ID_HELP", "CompareError", "Side", "anatomy", "anatomy_inputs", "anatomy_of", "candidates", "comparison",
           "dataset_of", "heatmap_of", "load_report_file", "load_side", "paired", "resolve_side", "sides", "verdict"]
