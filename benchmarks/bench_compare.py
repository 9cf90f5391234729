"""The compare page's work for two runs over 1000 MLPs at 1024 x 16: time to render and bytes sent.

Target (issue 14): warm, the verdict and the error anatomy render in under 1 s each, and what the page
sends (the callback's components and figures as JSON) is under 2 MB.

Two synthetic runs are recorded in a private run store with their predictions (64 MiB each, float32):
B = truth + noise of an MLP-dependent scale, A = B + a little more, so every statistic has work to do.
The reference means are random too, and the 1000 MLPs share one final weight matrix (the neuron
classes need only that; rebuilding 1000 real 1024 x 16 MLPs would time the weight generator, not the
page). Each step is what the page's callbacks do: load both sides (``cached_side``), ``verdict`` plus
the verdict panel and four figures; ``anatomy_of`` plus its figures and table; one MLP's heatmap.
"Cold" is the first pass of a fresh process (sides read from the store, neuron classes computed);
"warm" is the median of the next passes, recomputing the verdict and anatomy but with the sides and
classes cached (the page additionally memoizes both dicts, so a real warm view is cheaper still).

    nice -n 10 .venv/bin/python benchmarks/bench_compare.py [--mlps 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("WHESTBOARD_STATE_DIR", tempfile.mkdtemp(prefix="bench-compare-"))

import numpy as np  # noqa: E402
from plotly.utils import PlotlyJSONEncoder  # noqa: E402

from components import compare_panels as panels  # noqa: E402
from components.figures import compare as figs  # noqa: E402
from components.figures.style import use_app_template  # noqa: E402
from whestboard.compare import (  # noqa: E402
    anatomy_inputs,
    anatomy_of,
    cached_side,  # noqa: E402
    heatmap_of,
    verdict,
)
from whestboard.data import DatasetInfo  # noqa: E402
from whestboard.scoring import record_run  # noqa: E402

WIDTH, DEPTH, N_REF = 1024, 16, 10**9
TARGET_SECONDS, TARGET_BYTES = 1.0, 2 * 10**6


class SyntheticDataset:
    """References for ``n`` MLPs and one shared final weight matrix: what the anatomy reads of a dataset."""

    def __init__(self, truth: np.ndarray, last_weights: np.ndarray) -> None:
        self._truth, self._last = truth, last_weights
        self.generation = 0
        self.info = DatasetInfo(key="bench-1024x16", path=Path("(synthetic)"), format="synthetic",
                                round_tag="v2-phase2", width=WIDTH, depth=DEPTH, n_mlps=len(truth), n_samples=N_REF,
                                seed_protocol="3.0", split="bench")

    def truth(self, index: int):
        return self._truth[index], 4e-3

    def weights(self, index: int):
        return self._last[None]


def _report(label: str, mses: np.ndarray, per_layer: np.ndarray) -> dict:
    per_mlp = [{"mlp_index": i, "mlp_name": f"mlp-{i}", "final_layer_mse": float(m), "all_layers_mse": float(m),
                "per_layer_mse": per_layer[i].tolist(), "adjusted_final_layer_score": float(m) * 0.1,
                "avg_variance": 4e-3, "flops_used": 1e9, "effective_compute": 2e11, "failed": False}
               for i, m in enumerate(mses)]
    return {"source": "cli", "dataset": {"key": "bench-1024x16", "n_samples": N_REF, "width": WIDTH, "depth": DEPTH},
            "estimator": {"label": label, "kind": "file"}, "rulebook": {"round_tag": "v2-phase2", "flop_budget": 2**41},
            "run_config": {"flop_budget": 2**41},
            "results": {"per_mlp": per_mlp, "final_layer_mse": float(mses.mean()), "all_layers_mse": float(mses.mean()),
                        "adjusted_final_layer_score":
                        float(mses.mean()) * 0.1, "per_layer_mse": per_layer.mean(axis=0).tolist()},
            "versions": {}}


def build(n_mlps: int, seed: int) -> tuple[str, str, SyntheticDataset]:
    rng = np.random.default_rng(seed)
    truth = np.abs(rng.normal(0.0, 0.5, (n_mlps, DEPTH, WIDTH))).astype(np.float32)
    truth[:, :, : WIDTH // 10] = 0.0  # a tenth dead
    scale = np.exp(rng.normal(-9.0, 1.0, (n_mlps, 1, 1))).astype(np.float32)
    pred_b = truth + rng.standard_normal(truth.shape, dtype=np.float32) * scale
    pred_a = pred_b + rng.standard_normal(truth.shape, dtype=np.float32) * (0.3 * scale)
    ids = []
    for label, pred in (("A", pred_a), ("B", pred_b)):
        per_layer = ((pred.astype(np.float64) - truth) ** 2).mean(axis=2)
        ids.append(record_run(_report(label, per_layer[:, -1], per_layer),
                                       predictions={i: pred[i] for i in range(n_mlps)}))
        del pred
    last = rng.normal(0.0, np.sqrt(2.0 / WIDTH), (WIDTH, WIDTH)).astype(np.float32)
    return f"run:{ids[0]}", f"run:{ids[1]}", SyntheticDataset(truth, last)


def _payload(*parts) -> int:
    return len(json.dumps(parts, cls=PlotlyJSONEncoder).encode())


def one_pass(a: str, b: str, dataset) -> dict:
    started = time.perf_counter()
    side_a, side_b = cached_side(a), cached_side(b)
    loaded = time.perf_counter()
    result = verdict(side_a, side_b)
    verdict_parts = (panels.verdict_panel(result), figs.pair_scatter(result, "score"), figs.pair_scatter(result, "mse"),
                     figs.interval_figure(result), figs.noise_figure(result))
    verdict_bytes = _payload(*verdict_parts)
    verdict_done = time.perf_counter()
    inputs = anatomy_inputs(side_a, side_b, dataset)
    anatomy = anatomy_of(inputs)
    anatomy_parts = (figs.per_layer_figure(anatomy), figs.truth_bins_figure(anatomy), figs.shares_figure(anatomy),
                     panels.worst_table(anatomy["worst"], anatomy["has_b"]))
    anatomy_bytes = _payload(*anatomy_parts)
    anatomy_done = time.perf_counter()
    heat = figs.heatmap_figure(heatmap_of(anatomy_inputs(side_a, side_b, dataset, only=[0]), 0))
    heat_bytes = _payload(heat)
    heat_done = time.perf_counter()
    return {"load_s": loaded - started, "verdict_s": verdict_done - loaded, "anatomy_s": anatomy_done - verdict_done,
            "heatmap_s": heat_done - anatomy_done, "verdict_bytes": verdict_bytes, "anatomy_bytes": anatomy_bytes,
            "heatmap_bytes": heat_bytes, "n_shared": result["n_shared"],
            "limited_by": result["noise"].get("limited_by")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    use_app_template()
    t0 = time.perf_counter()
    a, b, dataset = build(args.mlps, args.seed)
    print(f"recorded two synthetic runs of {args.mlps} MLPs at {WIDTH} x {DEPTH} in {time.perf_counter() - t0:.1f} s")
    cold = one_pass(a, b, dataset)
    warm = [one_pass(a, b, dataset) for _ in range(args.repeats)]
    median = {k: statistics.median(p[k] for p in warm) for k in ("load_s", "verdict_s", "anatomy_s", "heatmap_s")}
    print(f"cold: load {cold['load_s']:.2f} s, verdict {cold['verdict_s']:.3f} s, anatomy {cold['anatomy_s']:.2f} s "
          f"(neuron classes computed), heatmap {cold['heatmap_s']:.3f} s")
    print(f"warm (median of {args.repeats}): load {median['load_s']:.4f} s, verdict {median['verdict_s']:.3f} s, "
          f"anatomy {median['anatomy_s']:.3f} s, heatmap {median['heatmap_s']:.3f} s")
    print(f"payload: verdict {cold['verdict_bytes'] / 1e6:.3f} MB, anatomy {cold['anatomy_bytes'] / 1e6:.3f} MB, "
          f"heatmap {cold['heatmap_bytes'] / 1e6:.3f} MB ({cold['n_shared']} shared MLPs, interval limited by "
          f"{cold['limited_by']})")
    worst = max(median["verdict_s"], median["anatomy_s"], median["heatmap_s"])
    biggest = max(cold["verdict_bytes"], cold["anatomy_bytes"], cold["heatmap_bytes"])
    ok = worst < TARGET_SECONDS and biggest < TARGET_BYTES
    print(f"target: each warm render < {TARGET_SECONDS} s and each payload < {TARGET_BYTES / 1e6:.0f} MB: "
          f"{'met' if ok else 'NOT met'} (slowest {worst:.3f} s, largest {biggest / 1e6:.3f} MB)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
