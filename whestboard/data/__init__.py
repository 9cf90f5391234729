"""The benchmark's MLPs: datasets on disk (official parquet, compact seeds), the registry, baking, statistics.

Owns: reading schema-3.0 directories and the compact format, the weights cache, the registry of served
datasets, the fast Monte Carlo sampler, baking compact datasets, per-MLP statistics for the explorer, and the
playground's MLPs made from (width, depth, seed) with their cached truth (``generated``).
A damaged MLP file is contained to that MLP (``Dataset.damaged``). May import: ``whestboard.rules``,
``whestboard.jobs`` (liveness of bake claims), ``whestboard.store`` (atomic files), ``whestboard.config``.
"""

from whestboard.data import bake, compact, datasets, generated, mlp_stats, registry, sampling, weights_cache
from whestboard.data.bake import BakeError, build_weights, plan_from_args
from whestboard.data.datasets import (
    DEAD_MEAN_THRESHOLD,
    DamagedMLP,
    Dataset,
    DatasetError,
    DatasetInfo,
    MLPDamaged,
    MLPNotFound,
    WeightsMismatch,
    dataset_identity,
    open_dataset,
    same_dataset,
)
from whestboard.data.registry import DatasetNotFound, get_dataset

__all__ = ["DEAD_MEAN_THRESHOLD", "BakeError", "DamagedMLP", "Dataset", "DatasetError", "DatasetInfo",
           "DatasetNotFound", "MLPDamaged", "MLPNotFound", "WeightsMismatch", "bake", "build_weights", "compact",
           "dataset_identity", "datasets", "generated", "get_dataset", "mlp_stats", "open_dataset", "plan_from_args", "registry",
           "same_dataset", "sampling", "weights_cache"]
