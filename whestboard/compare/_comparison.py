"""Two sides put together: the paired verdict (what ``compare --json`` prints and the page shows) and the
error anatomy. Plain dicts of numbers, so the CLI and the page read the very same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whestboard.cache import Region
from whestboard.compare import _anatomy
from whestboard.compare._paired import (
    FEWEST_MLPS_FOR_A_VERDICT,
    PUBLIC_SUITE_MLPS,
    noise_split,
    paired_stat,
    reference_noise_variance,
)
from whestboard.compare._sides import CompareError, Side, shared_indices
from whestboard.data import open_dataset, served_datasets
from whestboard.rules import blas_setup, describe_blas, failures_sentence
from whestboard.scoring import selection_text
from whestboard.store import json_safe

SCHEMA = "whestboard.compare/1"
#: Neuron classes of a final layer are two bool vectors per MLP: thousands fit in little memory.
CLASS_CACHE: Region[tuple[np.ndarray, np.ndarray]] = Region("compare-classes", max_entries=20_000)


def verdict(a: Side, b: Side) -> dict:
    """The paired comparison of A and B on their shared MLPs (negative differences: A is lower, better)."""
    shared = shared_indices(a, b)
    if not shared:
        where = (f"A was scored on {a.dataset_key}, B on {b.dataset_key}" if a.dataset_key != b.dataset_key
                 else f"they were scored on different MLPs of {a.dataset_key}")
        raise CompareError(f"{a.label} and {b.label} share no MLP ({where}): pick two things scored on common MLPs")

    def column(side: Side, key: str) -> np.ndarray:
        return np.array([side.entries[i][key] for i in shared], dtype=np.float64)

    scores = paired_stat(column(a, "adjusted_score"), column(b, "adjusted_score"), metric="adjusted_score")
    mses = paired_stat(column(a, "final_layer_mse"), column(b, "final_layer_mse"), metric="final_layer_mse")
    variance = column(a, "avg_variance")
    variance = np.where(np.isfinite(variance), variance, column(b, "avg_variance"))
    out = {
        "schema": SCHEMA,
        "a": a.describe(),
        "b": b.describe(),
        "n_shared": len(shared),
        "public_suite_mlps": PUBLIC_SUITE_MLPS,
        "score": scores.as_dict(),
        "final_layer_mse": mses.as_dict(),
        "noise": _noise(a, b, shared, variance, mses.mean_difference),
        "blas": blas_comparison(a, b),
        # what failed on each side among the shared MLPs: their scores are the grader's fallback, named everywhere
        "failures": {name: failures_sentence([side.entries[i]["failure"] for i in shared])
                     for name, side in (("a", a), ("b", b))},
        "per_mlp": {
            "mlp_index": shared,
            "mlp_name": [a.entries[i]["mlp_name"] or b.entries[i]["mlp_name"] for i in shared],
            "score_a": column(a, "adjusted_score").tolist(), "score_b": column(b, "adjusted_score").tolist(),
            "mse_a": column(a, "final_layer_mse").tolist(), "mse_b": column(b, "final_layer_mse").tolist(),
            "avg_variance": variance.tolist(),
            "failed_a": [bool(a.entries[i]["failure"]) for i in shared],
            "failed_b": [bool(b.entries[i]["failure"]) for i in shared],
        },
    }
    return json_safe(out)


def blas_comparison(a: Side, b: Side) -> dict:
    """Whether A and B ran under one BLAS set-up (library, version, kernel): float32 bits differ across them."""
    setup_a, setup_b = blas_setup(a.environment), blas_setup(b.environment)
    if setup_a is None or setup_b is None:
        return {"same": None, "sentence": "BLAS set-up not recorded for both sides."}
    if setup_a == setup_b:
        return {"same": True, "sentence": f"Both ran under {describe_blas(a.environment)}."}
    return {"same": False, "sentence": f"Different BLAS set-ups: A {describe_blas(a.environment)}, B "
                                       f"{describe_blas(b.environment)}; float32 results differ in their last "
                                       "digits across kernels, apart from the estimators."}


def _noise(a: Side, b: Side, shared: list[int], variance: np.ndarray, mean_difference: float) -> dict:
    """The reference-noise part of the MSE interval: needs an interval, both sides' predictions and N_ref.

    When it cannot be taken apart, ``reason`` says why and ``rescore`` lists, for each side without
    predictions that Whestboard can score (a built-in, Monte Carlo, a baseline), the run that would give
    them: ``{"side", "dataset", "estimator", "mlps"}`` (the lab's fields, ``score``'s options).
    """
    n_ref = a.n_reference_samples or b.n_reference_samples
    missing = [(name, s) for name, s in (("A", a), ("B", b)) if not all(i in s.predictions for i in shared)]
    if missing or not n_ref or not np.isfinite(variance).all():
        if not missing:
            why = "the reference's sample count" if not n_ref else "every MLP's avg_variance"
            return {"available": False, "rescore": [], "headline": f"needs {why}",
                    "reason": f"Taking the interval apart needs {why}."}
        mlps = selection_text(shared)
        rescore = [{"side": name, "dataset": s.dataset_key, "estimator": s.curve_spec, "mlps": mlps}
                   for name, s in missing if s.curve_spec and s.dataset_key]
        kinds = " and ".join(f"{name} ({_why_no_predictions(s)})" for name, s in missing)
        todo = ("Score " + " and ".join(f"{r['estimator']} on {r['dataset']} MLPs {r['mlps']}" for r in rescore)
                + " (the lab, or python -m whestboard score --json), then compare those runs: a run keeps its "
                "predictions." if rescore else
                "Only runs scored by Whestboard keep predictions; this side's code is not here to score again.")
        return {"available": False, "rescore": rescore, "headline": "needs both sides' predictions",
                "reason": f"Taking the interval apart needs both sides' predictions on the shared MLPs; {kinds}. "
                          + todo}
    if len(shared) < FEWEST_MLPS_FOR_A_VERDICT:
        return {"available": False, "rescore": [], "headline": f"no interval on {len(shared)} MLP(s)",
                "reason": f"No 95% interval on {len(shared)} shared MLP(s) (a paired test needs at least "
                          f"{FEWEST_MLPS_FOR_A_VERDICT}), so there is nothing to take apart."}
    noise = np.array([reference_noise_variance(a.predictions[i][-1], b.predictions[i][-1], v, n_ref)
                      for i, v in zip(shared, variance, strict=True)])
    differences = np.array([a.entries[i]["final_layer_mse"] - b.entries[i]["final_layer_mse"] for i in shared])
    split = noise_split(differences, noise, variance / n_ref)
    return {"available": True, "n_reference_samples": int(n_ref),
            "approximation": "sigma_i^2 taken as the MLP's avg_variance (the reference stores no per-neuron "
                             "variance)", **split.as_dict(mean_difference)}


def _why_no_predictions(side: Side) -> str:
    if side.kind == "baseline":
        return "a baseline: its files keep per-MLP results, not predictions"
    if side.kind == "submission":
        return "an imported submission: the grader's files carry no predictions"
    return f"a {side.kind} that stored no predictions"


# ---------------------------------------------------------------------------
# error anatomy
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnatomyInputs:
    """Aligned arrays of the shared MLPs that have predictions: what the anatomy functions take."""

    indices: list[int]
    truth: np.ndarray  # (mlps, depth, width) float32
    pred_a: np.ndarray
    pred_b: np.ndarray | None
    dead: np.ndarray  # (mlps, width) final layer
    always_on: np.ndarray
    per_layer_b: np.ndarray | None = None  # B's per-layer MSE from its results, when it has no predictions


def final_classes(dataset, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(dead, always_on) of one MLP's final layer, computed once per process (it needs the weights)."""
    info = dataset.info
    key = (str(info.path), info.format, info.n_samples, dataset.generation, int(index))

    def compute():
        means, _ = dataset.truth(index)
        return _anatomy.final_layer_classes(means, dataset.weights(index)[-1])

    return CLASS_CACHE.get_or_load(key, compute)


def anatomy_inputs(a: Side, b: Side | None, dataset, *, only: list[int] | None = None) -> AnatomyInputs:
    """Stack the shared MLPs with predictions (or ``only`` those of them); B's predictions only when it
    stored them for each."""
    keys = shared_indices(a, b) if b is not None else sorted(a.entries)
    indices = [i for i in keys if i in a.predictions and (only is None or i in only)]
    if not indices:
        raise CompareError(f"{a.label} stored no predictions, so its error cannot be taken apart: "
                           "score it with Whestboard (lab, score or upload)")
    with_b = b is not None and all(i in b.predictions for i in indices)
    truth = np.stack([dataset.truth(i)[0] for i in indices], dtype=np.float32)
    classes = [final_classes(dataset, i) for i in indices]
    return AnatomyInputs(
        indices, truth, np.stack([a.predictions[i] for i in indices], dtype=np.float32),
        np.stack([b.predictions[i] for i in indices], dtype=np.float32) if with_b else None,
        np.stack([c[0] for c in classes]), np.stack([c[1] for c in classes]),
        None if with_b or b is None else _reported_per_layer(b, indices, truth.shape[1]),
    )


def _reported_per_layer(side: Side, indices: list[int], depth: int) -> np.ndarray | None:
    """A side's per-layer MSE averaged over ``indices`` from its own per-MLP results (baselines carry them)."""
    rows = [side.entries[i]["per_layer_mse"] for i in indices]
    if not all(isinstance(r, list) and len(r) == depth for r in rows):
        return None
    return np.mean(np.asarray(rows, dtype=np.float64), axis=0)


def anatomy_of(inputs: AnatomyInputs) -> dict:
    """Per-layer MSE, neuron-type shares, error by |true mean| and the worst neurons, for A (and B, A - B)."""
    final = slice(None), -1
    sq_a = _anatomy.squared_errors(inputs.pred_a[final], inputs.truth[final])
    sq_b = None if inputs.pred_b is None else _anatomy.squared_errors(inputs.pred_b[final], inputs.truth[final])
    sweep = _anatomy.sweep_layers(inputs.pred_a, inputs.truth, inputs.indices, inputs.pred_b)
    out = {
        "mlp_index": inputs.indices,
        "has_b": sq_b is not None,
        "per_layer_mse_a": sweep.per_layer_a.tolist(),
        "shares_a": _anatomy.class_shares(sq_a, inputs.dead, inputs.always_on).as_dict(),
        "by_truth": _anatomy.error_by_truth(inputs.truth[final], sq_a, sq_b).as_dict(),
        "worst": sweep.worst,
    }
    if sq_b is None and inputs.per_layer_b is not None:
        out["per_layer_mse_b"] = inputs.per_layer_b.tolist()
    if sweep.per_layer_b is not None:
        out["per_layer_mse_b"] = sweep.per_layer_b.tolist()
        out["shares_b"] = _anatomy.class_shares(sq_b, inputs.dead, inputs.always_on).as_dict()
        out["shares_difference"] = _anatomy.class_shares(sq_a - sq_b, inputs.dead, inputs.always_on).as_dict()
    return json_safe(out)


def heatmap_of(inputs: AnatomyInputs, mlp_index: int) -> _anatomy.ErrorHeatmap:
    """One shared MLP's error map (A, or A - B when B has predictions)."""
    if mlp_index not in inputs.indices:
        raise CompareError(f"MLP {mlp_index} is not among the compared MLPs with predictions "
                           f"({inputs.indices[0]}..{inputs.indices[-1]})")
    m = inputs.indices.index(mlp_index)
    return _anatomy.error_heatmap(mlp_index, inputs.pred_a[m], inputs.truth[m],
                                 None if inputs.pred_b is None else inputs.pred_b[m])


def dataset_of(side: Side):
    """The dataset a side was scored on (its references and weights): a served one, else the directory
    its run read (a CLI run of a dataset folder); CompareError when neither is there."""
    served = served_datasets().get(side.dataset_key or "")
    if served is not None:
        return served
    if side.dataset_path and Path(side.dataset_path).is_dir():
        ds = open_dataset(side.dataset_path)
        if ds.info.key == side.dataset_key:
            return ds
    raise CompareError(f"dataset {side.dataset_key!r} of {side.label} is not served here, so its references "
                       "cannot be read: add its folder to WHESTBOARD_DATASETS")
