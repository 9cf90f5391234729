"""The paper's main figure, measured here: cumulant propagation's MSE / Var against its FLOPs, per shape.

ARC's paper plots, for random ReLU MLPs of widths 8 to 256 at depth 16, each variant and order of
cumulant propagation as a point (x: FLOPs, y: final-layer MSE divided by the mean final-layer variance,
both log) beside sampling's line MSE / Var = 1 / m, m the number of forward passes the same FLOPs buy.
This module measures the same thing on whestbench's own MLPs: every ``cumulant:K[:VARIANT]`` spec
(``CUMULANT_KINDS``) is metered by flopscope on each MLP and compared with a Monte Carlo reference of
``n_ref`` samples on the MLP's own sampling stream, whose noise floor ``avg_variance / n_ref`` is kept
beside every point, normalised the same way (so 1 / n_ref in MSE / Var).

Two kinds of shape:

* the paper's: widths 8..256 at depth 16, MLPs from seeds 0..m-1 (seed protocol 3.0), run with the
  whole third-cumulant history (the reference's estimate, no budget);
* the rounds': the first MLPs of an embedded dataset, each spec under its round's budget (the window
  ``cumulant:3`` carries there), against the dataset's own reference.

The job is resumable: one JSON file per (shape, MLP) under ``data/paper/`` (``WHESTBOARD_PAPER_DIR``), kept when its settings
match; a file made before a spec was added keeps its results, and only the new spec is measured (against the
same reference, drawn again from the same stream, or the dataset's). ``paper_view`` reads them back into the
plain view the figure is drawn from.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import flopscope as flops
import numpy as np
from whestbench.seeds import derive_seed_streams

from whestboard.config import paper_dir
from whestboard.data import Shape, generate, get_dataset, layer_statistics
from whestboard.rules import get_round, library_versions, metered_mc_flops_per_sample
from whestboard.scoring import CUMULANT_KINDS, builtin_choices, resolve_estimator
from whestboard.store import write_json

PAPER_WIDTHS = (8, 16, 32, 64, 128, 256)
PAPER_DEPTH = 16
DEFAULT_MLPS = 4
#: 2^20 samples: a floor of MSE / Var = 9.5e-7, a few minutes of sampling at 256 x 16 on two cores.
DEFAULT_N_REF = 2**20
#: Budget given to ``predict`` on the paper's shapes: far above what any spec spends, so K = 3 carries its
#: whole history (the reference's estimate); FLOPs are what flopscope meters, not this number.
UNBOUNDED_BUDGET = 10**16
FORMAT = 1
ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class PaperPoint:
    """One spec on one shape: means over its MLPs, and the 10-90% spread of MSE / Var across them."""

    spec: str
    label: str
    flops: float
    mse_over_var: float
    low: float
    high: float
    noise_floor: float  # mean over MLPs of (avg_variance / n_ref) / avg_variance, the same normalisation
    n_mlps: int


@dataclass(frozen=True)
class PaperShape:
    key: str  # "256x16" or a round tag
    title: str
    width: int
    depth: int
    n_ref: int
    flops_per_sample: int  # one Monte Carlo forward pass, as flopscope bills it
    budget: int | None
    points: tuple[PaperPoint, ...]


@dataclass(frozen=True)
class PaperView:
    shapes: tuple[PaperShape, ...]
    problems: tuple[str, ...] = field(default=())

    def shape(self, key: str | None) -> PaperShape | None:
        return next((s for s in self.shapes if s.key == key), self.shapes[0] if self.shapes else None)

    def options(self) -> list[dict]:
        return [{"label": s.title, "value": s.key} for s in self.shapes]


# ---------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------


def spec_labels() -> dict[str, str]:
    """Legend names of the specs the figure shows, as the lab's menu names them."""
    return {c["value"]: c["label"] for c in builtin_choices() if c["value"] in CUMULANT_KINDS}


def metered(spec: str, mlp, budget: int) -> tuple[float, np.ndarray]:
    """(FLOPs flopscope meters for ``predict``, its final-layer estimate) of one spec on one MLP."""
    estimator = resolve_estimator(spec).factory()
    with flops.BudgetContext(flop_budget=10 * UNBOUNDED_BUDGET, quiet=True) as ctx:
        estimate = estimator.predict(mlp, budget)
    return float(ctx.flops_used), np.asarray(estimate, dtype=np.float64)[-1]


def measure_mlp(mlp, truth_final: np.ndarray, avg_variance: float, budget: int,
                specs: Sequence[str]) -> dict[str, dict]:
    """Per spec: FLOPs and final-layer MSE against the reference (raw, as the grader forms it)."""
    out = {}
    for spec in specs:
        spent, final = metered(spec, mlp, budget)
        mse = float(np.mean((final - np.asarray(truth_final, dtype=np.float64)) ** 2))
        out[spec] = {"flops": spent, "final_layer_mse": mse, "mse_over_var": mse / avg_variance}
    return out


def _settings(kind: str, width: int, depth: int, n_ref: int, budget: int | None, specs: Sequence[str]) -> dict:
    versions = library_versions()
    return {"format": FORMAT, "kind": kind, "width": width, "depth": depth, "n_ref": int(n_ref),
            "budget": budget, "specs": list(specs), "flopscope_version": versions["flopscope_version"],
            "whestbench_version": versions["whestbench_version"]}


def _stored(path: Path, settings: dict) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("settings") == settings else None


def _extendable(path: Path, settings: dict) -> dict | None:
    """A record made with these settings but fewer specs (a spec added since): kept, and only what is missing
    is measured against the same reference."""
    try:
        record = json.loads(path.read_text())
        stored = dict(record["settings"])
        specs = stored.pop("specs")
        results = record["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wanted = {k: v for k, v in settings.items() if k != "specs"}
    if stored != wanted or not set(specs) < set(settings["specs"]) or not all(s in results for s in specs):
        return None
    return record


def _merged(earlier: dict | None, mlp, truth_final: np.ndarray, avg_variance: float, budget: int,
            specs: Sequence[str]) -> dict[str, dict]:
    """Every spec's result (``measure_mlp``): an earlier record's where it holds one and was measured against
    the same reference (the same avg_variance), the rest measured now."""
    if earlier is None or not math.isclose(earlier["avg_variance"], avg_variance, rel_tol=1e-12):
        return measure_mlp(mlp, truth_final, avg_variance, budget, specs)
    fresh = measure_mlp(mlp, truth_final, avg_variance, budget, [s for s in specs if s not in earlier["results"]])
    return {s: earlier["results"].get(s, fresh.get(s)) for s in specs}


def paper_shape_key(width: int, depth: int) -> str:
    return f"{width}x{depth}"


def measure_paper_shape(width: int, depth: int, seeds: Sequence[int], *, n_ref: int, out: Path | None = None,
                        specs: Sequence[str] = CUMULANT_KINDS, log: ProgressFn = print) -> int:
    """Measure every spec on the MLPs of these seeds (whole history, no budget); returns how many were new."""
    settings = _settings("paper", width, depth, n_ref, None, specs)
    folder = (out or paper_dir()) / paper_shape_key(width, depth)
    done = 0
    for seed in seeds:
        path = folder / f"mlp-{seed}.json"
        if _stored(path, settings):
            continue
        generated = generate(Shape(width, depth, int(seed)))
        _weight_ss, sample_ss, _ = derive_seed_streams(int(seed))
        means, avg_variance = layer_statistics(list(generated.weights), n_ref, np.random.default_rng(sample_ss))
        results = _merged(_extendable(path, settings), generated.mlp, means[-1], avg_variance, UNBOUNDED_BUDGET,
                          specs)
        write_json(path, {"settings": settings, "mlp_seed": int(seed), "avg_variance": float(avg_variance),
                          "results": results})
        log(f"{width} x {depth}, MLP seed {seed}: " + ", ".join(
            f"{s} {r['mse_over_var']:.3g}" for s, r in results.items()))
        done += 1
    return done


def measure_round_shape(round_tag: str, indices: Sequence[int], *, out: Path | None = None,
                        specs: Sequence[str] = CUMULANT_KINDS, log: ProgressFn = print) -> int:
    """Measure every spec on the first MLPs of the round's embedded dataset, under the round's budget."""
    dataset = get_dataset(round_tag)
    budget = int(get_round(round_tag).budget)
    settings = _settings("round", dataset.info.width, dataset.info.depth, dataset.info.n_samples, budget, specs)
    settings["dataset"] = dataset.info.key
    done = 0
    for index in indices:
        path = (out or paper_dir()) / round_tag / f"mlp-{index}.json"
        if _stored(path, settings):
            continue
        means, avg_variance = dataset.truth(index)
        results = _merged(_extendable(path, settings), dataset.mlp(index), means[-1], avg_variance, budget, specs)
        write_json(path, {"settings": settings, "mlp_index": int(index), "avg_variance": float(avg_variance),
                          "results": results})
        log(f"{round_tag}, MLP {index}: " + ", ".join(f"{s} {r['mse_over_var']:.3g}" for s, r in results.items()))
        done += 1
    return done


# ---------------------------------------------------------------------------
# the view
# ---------------------------------------------------------------------------


def _point(spec: str, label: str, records: list[dict]) -> PaperPoint:
    ratios = np.array([r["results"][spec]["mse_over_var"] for r in records], dtype=np.float64)
    n_ref = records[0]["settings"]["n_ref"]
    floors = np.array([(r["avg_variance"] / n_ref) / r["avg_variance"] for r in records], dtype=np.float64)
    low, high = np.percentile(ratios, [10, 90])
    return PaperPoint(spec=spec, label=label,
                      flops=float(np.mean([r["results"][spec]["flops"] for r in records])),
                      mse_over_var=float(ratios.mean()), low=float(low), high=float(high),
                      noise_floor=float(floors.mean()), n_mlps=len(records))


def _shape_order(key: str) -> tuple:
    match = re.fullmatch(r"(\d+)x(\d+)", key)
    return (0, int(match.group(2)), int(match.group(1))) if match else (1, 0, key)


def paper_view(directory: Path | None = None) -> PaperView:
    """Every measured shape under ``directory`` (default ``data/paper``, ``WHESTBOARD_PAPER_DIR``); unreadable
    files are named in ``problems``, not drawn."""
    directory = Path(directory or paper_dir())
    labels = spec_labels()
    shapes, problems = [], []
    folders = sorted((p for p in Path(directory).glob("*") if p.is_dir()), key=lambda p: _shape_order(p.name))
    for folder in folders:
        records = []
        for path in sorted(folder.glob("mlp-*.json")):
            try:
                record = json.loads(path.read_text())
                record["settings"]["width"], record["results"]  # noqa: B018 - the fields the view needs
            except (OSError, ValueError, KeyError, TypeError):
                problems.append(f"{path.relative_to(directory)} is unreadable")
                continue
            records.append(record)
        if not records:
            continue
        settings = records[0]["settings"]
        records = [r for r in records if r["settings"] == settings]
        width, depth = int(settings["width"]), int(settings["depth"])
        specs = [s for s in settings["specs"] if all(s in r["results"] for r in records)]
        points = tuple(_point(s, labels.get(s, s), records) for s in specs)
        if settings["kind"] == "round":
            title = f"{folder.name}: {width} x {depth} under its budget ({len(records)} MLPs)"
        else:
            title = f"{width} x {depth} ({len(records)} MLPs)"
        shapes.append(PaperShape(key=folder.name, title=title, width=width, depth=depth, n_ref=int(settings["n_ref"]),
                                 flops_per_sample=int(metered_mc_flops_per_sample(width, depth)),
                                 budget=settings.get("budget"), points=points))
    return PaperView(shapes=tuple(shapes), problems=tuple(problems))


def sampling_line(shape: PaperShape, flops_range: tuple[float, float], n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Sampling's MSE / Var = 1 / m, m = FLOPs / one forward pass, across ``flops_range`` (from m = 1 on)."""
    lo = max(flops_range[0], float(shape.flops_per_sample))
    xs = np.logspace(math.log10(lo), math.log10(max(flops_range[1], lo * 10)), n)
    return xs, shape.flops_per_sample / xs
