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


#: Per-MLP fields that measure time, not the estimator: they differ between any two runs.
TIMING = {"wall_time_s", "flopscope_backend_time_s", "flopscope_overhead_time_s", "residual_wall_time_s"}


def untimed(breakdown: dict | None) -> dict | None:
    """A FLOP breakdown without its timings: budget, FLOPs and every operation's cost and calls."""
    if breakdown is None:
        return None
    return {
        "flop_budget": breakdown["flop_budget"],
        "flops_used": breakdown["flops_used"],
        "flops_remaining": breakdown["flops_remaining"],
        "ops": {(ns, op): (info["flop_cost"], info["calls"]) for ns, bucket in breakdown["by_namespace"].items()
                for op, info in bucket["operations"].items()},
    }


def assert_same_per_mlp(ours: dict, theirs: dict, fields: tuple[str, ...] | None = None) -> int:
    """Every per-MLP field ``whest run --json`` reports (or only ``fields``) equal in ours, timings aside; a
    traceback present in both or neither. Returns how many fields were compared."""
    compared = 0
    mine, upstream = ours["results"]["per_mlp"], theirs["results"]["per_mlp"]
    assert len(mine) == len(upstream)
    for a, b in zip(mine, upstream, strict=True):
        assert set(b) <= set(a), set(b) - set(a)
        for field, value in b.items():
            if field in TIMING or field == "traceback" or (fields is not None and field not in fields):
                continue
            if field == "breakdowns":
                assert untimed(a[field]["estimator"]) == untimed(value["estimator"])
            else:
                assert a[field] == value, field
            compared += 1
        assert (a.get("traceback") is None) == (b.get("traceback") is None)
    return compared

