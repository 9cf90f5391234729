"""Two estimators side by side: a paired, noise-aware verdict on their shared MLPs, and where the error comes from.

Owns: the paired statistics (mean paired differences of scores and final-layer MSEs with bootstrap
intervals, the geometric-mean ratio, wins and losses, the sign-flip test, MLPs needed), the split of the
MSE interval into reference noise and MLP-to-MLP spread, the error anatomy (per layer, by neuron type,
by |true mean|, worst neurons, one MLP's heatmap), two budget curves paired budget by budget, and loading the sides compared (runs, submissions
with per-MLP results, baselines, ``score --json`` reports). May import: ``whestboard.leaderboard``,
``whestboard.band``, ``whestboard.scoring``, ``whestboard.data``, ``whestboard.rules``, ``whestboard.store``,
``whestboard.config``.
"""

from whestboard.compare._anatomy import (
    CLASS_LABELS,
    CLASSES,
    ErrorHeatmap,
    class_shares,
    error_by_truth,
    error_heatmap,
    squared_errors,
)
from whestboard.compare._comparison import anatomy_inputs, anatomy_of, dataset_of, heatmap_of, verdict
from whestboard.compare._curves import CURVE_METRICS, curve_defaults, paired_curves
from whestboard.compare._paired import mlps_needed_text, paired_stat, too_few_sentence, verdict_sentence
from whestboard.compare._sides import (
    ID_HELP,
    CompareError,
    Side,
    cached_side,
    candidates,
    load_report_file,
    load_side,
    resolve_side,
    stores_revision,
)

__all__ = [
    "anatomy_inputs",
    "anatomy_of",
    "cached_side",
    "candidates",
    "CLASS_LABELS",
    "class_shares",
    "CLASSES",
    "CompareError",
    "curve_defaults",
    "CURVE_METRICS",
    "dataset_of",
    "error_by_truth",
    "error_heatmap",
    "ErrorHeatmap",
    "heatmap_of",
    "ID_HELP",
    "load_report_file",
    "load_side",
    "mlps_needed_text",
    "paired_curves",
    "paired_stat",
    "resolve_side",
    "Side",
    "squared_errors",
    "stores_revision",
    "too_few_sentence",
    "verdict_sentence",
    "verdict",
]
