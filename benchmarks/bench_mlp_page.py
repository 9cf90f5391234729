"""How fast the MLP explorer serves a full-size (1024 x 16) MLP, and how much it sends.

Targets (issue 3): an MLP page renders cold in under ~1.5 s and warm in under
~200 ms, and no response is larger than ~2 MB.

Uses the embedded ``data/v2-phase2`` when at least one MLP is baked; otherwise
bakes a one-MLP compact dataset with 1024 reference samples into a temporary
folder (the sample count changes the reference's precision, not the page's
work). Requests go through Flask's test client exactly as the browser sends
them: the page router callback, then the page's own callbacks.

    .venv/bin/python benchmarks/bench_mlp_page.py [--repeats 5] [--cold-repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flask_dash import TestClientCaller, component_key  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COLD_TARGET_S = 1.5
WARM_TARGET_S = 0.2
PAYLOAD_TARGET_BYTES = 2_000_000


def _bake_fallback(folder: Path) -> Path:
    out = folder / "v2-phase2-bench"
    print(f"data/v2-phase2 has no baked MLP; baking a 1024 x 16 MLP with 1024 samples into {out}")
    subprocess.run([sys.executable, "-m", "whestboard", "bake", "--round", "v2-phase2", "--n-mlps", "1",
                    "--samples", "1024", "--out", str(out)], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def _choose_dataset(tmp: Path) -> None:
    """Point the app at a 1024 x 16 dataset before it is imported."""
    sys.path.insert(0, str(REPO))
    from whestboard.data import DatasetError, open_dataset

    try:
        embedded = open_dataset(REPO / "data" / "v2-phase2")
        if embedded.indices:
            return
    except DatasetError:
        pass
    os.environ["WHESTBOARD_DATASETS"] = str(_bake_fallback(tmp))
    os.environ["WHESTBOARD_DATA_DIR"] = str(tmp / "no-embedded-data")


def _clear_caches() -> None:
    """Empty every cache a cold render could profit from: weights, statistics and figures (the
    cache service's regions; its shared backend is Redis only when WHESTBOARD_REDIS_URL is set)."""
    from pages import mlp
    from whestboard.data import STATS_CACHE, WEIGHTS_CACHE

    WEIGHTS_CACHE.clear()
    STATS_CACHE.clear()
    mlp.static_figures.cache.clear()
    mlp.heatmap_of.cache.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="warm renders to take the median of")
    parser.add_argument("--cold-repeats", type=int, default=3, help="cold renders (caches emptied) to take the median of")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wb-bench-") as tmp:
        os.environ["WHESTBOARD_STATE_DIR"] = str(Path(tmp) / "state")
        _choose_dataset(Path(tmp))
        started = time.perf_counter()
        import app as app_module
        from whestboard.data import served_datasets

        import_s = time.perf_counter() - started
        ds = next(d for d in served_datasets().values() if (d.info.width, d.info.depth) == (1024, 16))
        key, index = ds.info.key, ds.indices[0]
        print(f"dataset {key} ({ds.info.path}), {ds.info.shape_label}, MLP {index}; app import {import_s:.2f} s")
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start "
              "(other work on the machine slows every number below)")
        client = TestClientCaller(app_module.server)
        rows = _measure(client, key, index, ds.info.width, args.repeats, args.cold_repeats)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    _report(rows)
    return 0 if all(r[3] is None or r[1] <= r[3] for r in rows) else 1


def _measure(client: TestClientCaller, key: str, index: int, width: int, repeats: int, cold_repeats: int) -> list[tuple]:
    """(label, value, unit, target) rows."""
    path = f"/mlp/{key}/{index}"
    rows: list[tuple] = []
    sizes: dict[str, int] = {}

    t, n, _ = client.router("/explorer", f"?dataset={key}")
    sizes["explorer list"] = n
    rows.append(("explorer list, first render (s)", t, "s", None))

    t, n, _ = client.router(path)
    rows.append(("MLP page, first request of the process (s)", t, "s", None))
    cold = []
    for _ in range(cold_repeats):
        _clear_caches()
        t, n, _ = client.router(f"/mlp/{key}/{index}")
        cold.append(t)
    sizes["MLP page"] = n
    rows.append((f"MLP page cold, empty caches: median of {cold_repeats} (s)", statistics.median(cold), "s",
                 COLD_TARGET_S))
    rows.append((f"  cold range over {cold_repeats} (s): min", min(cold), "s", None))
    rows.append(("  cold range: max", max(cold), "s", None))
    warm = [client.router(path)[0] for _ in range(repeats)]
    rows.append((f"MLP page warm: median of {repeats} (s)", statistics.median(warm), "s", WARM_TARGET_S))

    ident = {"dataset": key, "index": index}
    heatmap = {"plot": "heatmap", "type": "mlp-clickable"}
    t, n, _ = client.callback([(heatmap, "figure")], [("mlp-heatmap-order", "value", True)],
                              [("mlp-ident", "data", ident)])
    sizes["heatmap reorder"] = n
    rows.append(("heatmap 'order by value', first (s)", t, "s", WARM_TARGET_S))
    click = {"points": [{"x": 100, "y": 7, "curveNumber": 0}]}
    t, n, body = client.callback(
        [("mlp-layer", "value"), ("mlp-neuron", "value")],
        [(component_key({"plot": "heatmap", "type": "mlp-clickable"}), "clickData", click)],
        [("mlp-heatmap-order", "value", True), ("mlp-ident", "data", ident)],
        changed=[component_key(heatmap) + ".clickData"],
    )
    rows.append(("heatmap click -> neuron (s)", t, "s", WARM_TARGET_S))
    neuron = body["response"]["mlp-neuron"]["value"]
    t, n, _ = client.callback([("mlp-drilldown", "children")],
                              [("mlp-layer", "value", 7), ("mlp-neuron", "value", neuron)],
                              [("mlp-ident", "data", ident)])
    sizes["drill-down"] = n
    rows.append(("drill-down panel (s)", t, "s", WARM_TARGET_S))
    for plot in ("heatmap", "weights"):
        csv_id = {"plot": plot, "type": "mlp-csv"}
        t, n, _ = client.callback([("mlp-download", "data")], [(component_key(csv_id), "n_clicks", 1)],
                                  [("mlp-heatmap-order", "value", False), ("mlp-ident", "data", ident)],
                                  changed=[component_key(csv_id) + ".n_clicks"])
        sizes[f"CSV {plot}"] = n
        rows.append((f"CSV download '{plot}' (s)", t, "s", None))
    rows += _cold_breakdown(client, key, index)
    started = time.perf_counter()
    client.callback([("mlp-drilldown", "children")], [("mlp-layer", "value", 3), ("mlp-neuron", "value", 5)],
                    [("mlp-ident", "data", ident)])
    rows.append(("  then a drill-down at once (weights loading) (s)",
                 time.perf_counter() - started, "s", None))
    sizes["explorer list, 1000 MLPs (grid only)"] = _grid_bytes(1000)
    for name, n in sizes.items():
        rows.append((f"payload: {name} (bytes)", n, "B", PAYLOAD_TARGET_BYTES))
    _check_width(width)
    return rows


def _grid_bytes(n_mlps: int) -> int:
    """JSON size of the MLP grid for a full split (1000 MLPs), built from a synthetic summary:
    its size depends on the row count, not on the widths."""
    import numpy as np
    import pandas as pd
    from plotly.io.json import to_json_plotly

    from components.explorer_panels import mlp_grid

    rng = np.random.default_rng(0)
    summary = pd.DataFrame({
        "index": np.arange(n_mlps), "mlp_id": np.arange(n_mlps),
        "mlp_name": [f"firstname-lastname{i}" for i in range(n_mlps)],
        "mlp_seed": rng.integers(0, 2**63 - 1, n_mlps, dtype=np.int64),
        **{c: rng.random(n_mlps) for c in ("avg_variance", "final_mean_avg", "final_mean_median", "final_mean_max",
                                           "final_dead_fraction", "dead_fraction", "noise_floor")},
        "damaged": np.zeros(n_mlps, dtype=bool), "damage": [""] * n_mlps,
    })
    return len(to_json_plotly(mlp_grid(summary, "full")))


def _cold_breakdown(client: TestClientCaller, key: str, index: int) -> list[tuple]:
    """Where a cold render's time goes, measured step by step after emptying the caches."""
    from pages import mlp
    from whestboard.data import STATS_CACHE, WEIGHTS_CACHE, get_dataset, stats_cache_key, stats_for

    _clear_caches()
    ds = get_dataset(key)
    steps = []
    started = time.perf_counter()
    ds.weights(index)
    steps.append(("  cold part: weights (rebuild from seed + checksum)", time.perf_counter() - started))
    started = time.perf_counter()
    stats_for(ds, index)  # as the page does: kept here and in the shared backend when there is one
    steps.append(("  cold part: statistics (mlp_stats)", time.perf_counter() - started))
    started = time.perf_counter()
    mlp.static_figures(stats_cache_key(ds, index), key, index)
    mlp.heatmap_of(stats_cache_key(ds, index), key, index, False)
    steps.append(("  cold part: figures", time.perf_counter() - started))
    steps.append(("  cold part: layout + JSON (a warm render)", client.router(f"/mlp/{key}/{index}")[0]))
    # A new worker process: statistics come from the shared cache, weights are not needed.
    STATS_CACHE.clear()
    mlp.static_figures.cache.clear()
    mlp.heatmap_of.cache.clear()
    WEIGHTS_CACHE.clear()
    steps.append(("another worker: statistics from the shared backend, else recomputed (s)", client.router(f"/mlp/{key}/{index}")[0]))
    return [(label, seconds, "s", None) for label, seconds in steps]


def _check_width(width: int) -> None:
    if width != 1024:
        raise SystemExit(f"expected a 1024-wide dataset, got {width}")


def _report(rows: list[tuple]) -> None:
    print()
    print(f"{'measurement':52s} {'value':>12s} {'target':>10s} {'ratio':>7s}")
    for label, value, unit, target in rows:
        shown = f"{value:,.0f}" if unit == "B" else f"{value:.3f}"
        if target is None:
            print(f"{label:52s} {shown:>12s} {'':>10s} {'':>7s}")
            continue
        tshown = f"{target:,.0f}" if unit == "B" else f"{target:.3f}"
        ratio = value / target
        flag = "ok" if ratio <= 1 else "OVER"
        print(f"{label:52s} {shown:>12s} {tshown:>10s} {ratio:6.2f}x {flag}")
    print("\nratio = measured / target (below 1 meets the target)")


if __name__ == "__main__":
    raise SystemExit(main())
