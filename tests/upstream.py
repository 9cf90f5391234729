"""Reference data made by whestbench itself, for comparing Whestboard against."""

from __future__ import annotations

import os
from pathlib import Path

SEEDS = [1234567, 42, 2**62 + 7, 99]


def make_official(path: Path, *, width=24, depth=3, n_samples=3000, seeds=SEEDS) -> Path:
    """A schema-3.0 directory written by ``whestbench.create_dataset``."""
    import warnings

    from whestbench import create_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        create_dataset(
            n_mlps=len(seeds), n_samples=n_samples, width=width, depth=depth,
            mlp_seeds=list(seeds), output_path=path,
        )
    return path


def whestbench_mlps(path: Path, hf_home: Path):
    """MLPs and targets exactly as whestbench's own loader yields them."""
    os.environ["HF_HOME"] = str(hf_home)
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import numpy as np
    import whestbench

    ds = whestbench.load_dataset(str(path))
    out = []
    for i in range(len(ds)):
        row = ds[i]
        out.append(
            {
                "mlp": whestbench.mlp_at(ds, i),
                "all_layer_means": np.asarray(row["all_layer_means"], dtype=np.float32),
                "avg_variance": float(row["avg_variance"]),
                "mlp_seed": int(row["mlp_seed"]),
                "mlp_name": row["mlp_name"],
            }
        )
    return out
