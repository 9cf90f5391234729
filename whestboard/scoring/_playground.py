"""Every estimator on one generated MLP, metered and scored exactly as the lab scores a dataset's MLP.

Each estimator goes through ``runs.score_one`` (``whestbench.scoring.evaluate_estimator`` on a
one-MLP suite under the round's full rulebook), so its FLOPs, MSEs, multiplier and failure flags are
the grader's. Results are cached per (MLP, truth, estimator code, rulebook, library versions): in this
process, and in the shared artifact store (``whestboard.store._blobs``), which is how a background job
on any machine hands its work to the web process that draws it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from whestboard.cache import Region
from whestboard.data import GeneratedMLP, Shape, Truth, cached_truth, generate, generated_truth
from whestboard.rules import library_versions
from whestboard.scoring._estimators import resolve_estimator
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._rulebook import Rulebook, rulebook_for
from whestboard.scoring._runs import MLPCase, score_one
from whestboard.store import get_blob_arrays, prune_blobs, put_blob_arrays

BUILTIN_SPECS = ("mean", "cov", "combined", "cumulant:3", "cumulant:3:simple")
BUILTIN_LABELS = {"mean": "mean propagation", "cov": "covariance propagation", "combined": "combined",
                  "cumulant:3": "cumulant propagation, K = 3 (BASE)",
                  "cumulant:3:simple": "cumulant propagation, K = 3 (SIMPLE)"}
DEFAULT_MC_SAMPLES = 1_000
SCORE_FILES_KEPT = 2048
SCORES = "playground-score"
#: What building an estimator raises when its upload is gone or refused: that one is left out, in words.
UNBUILDABLE = (KeyError, FileNotFoundError, ValueError)
#: Progress is reported as (what, fraction of the whole job done).
ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class Scored:
    """One estimator's result on the MLP: the grader's per-MLP entry and the predictions it scored."""

    spec: str
    label: str
    entry: dict
    predictions: np.ndarray  # float32 (depth, width): the zero fallback when the MLP failed

    @property
    def failed(self) -> bool:
        return bool(self.entry.get("failed"))


@dataclass(frozen=True)
class Playground:
    """One MLP, its truth and every estimator's result: what the page draws."""

    shape: Shape
    generated: GeneratedMLP
    truth: Truth
    rulebook: Rulebook
    results: tuple[Scored, ...]
    problems: tuple[str, ...] = ()  # estimators that could not even be built (an upload gone), in words


def rulebook_for_shape(shape: Shape, round_tag: str | None = None) -> Rulebook:
    """The round asked for, else the round of this shape, else the current round: its rules, its B."""
    return rulebook_for(round_tag or shape.round_tag)


def estimator_specs(mc_samples: int, uploads: Sequence[str] = ()) -> list[str]:
    """The built-ins, Monte Carlo with ``mc_samples``, then each upload of the session (``upload:<sha>``)."""
    return [*BUILTIN_SPECS, f"mc:{int(mc_samples)}", *(f"upload:{sha}" for sha in uploads)]


def label_for(spec: str, handle: EstimatorHandle) -> str:
    if spec in BUILTIN_LABELS:
        return BUILTIN_LABELS[spec]
    if spec.startswith("mc:"):
        return f"Monte Carlo, {int(spec[3:]):,} samples"
    return handle.label


def score_key(shape: Shape, drawn: Truth, handle: EstimatorHandle, rulebook: Rulebook) -> str:
    """What pins a result: the MLP, the truth it is scored against, the code, the rules, the versions."""
    payload = {
        "shape": dataclasses.asdict(shape),
        "truth_sha256": hashlib.sha256(np.ascontiguousarray(drawn.means).tobytes()).hexdigest(),
        "avg_variance": drawn.avg_variance,
        "n_samples": drawn.n_samples,
        "estimator": {k: v for k, v in handle.describe().items() if k != "description"},
        "rulebook": dataclasses.asdict(rulebook),
        "versions": {k: v for k, v in library_versions().items() if k != "numpy_version"},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


_SCORES: Region[tuple[dict, np.ndarray]] = Region("playground-scores", share=1 / 8,
                                                  size_of=lambda v: int(v[1].nbytes) + 4096)


def _read_score(key: str) -> tuple[dict, np.ndarray] | None:
    archive = get_blob_arrays(SCORES, key)
    try:
        return json.loads(str(archive["entry"])), np.asarray(archive["predictions"], dtype=np.float32)
    except (TypeError, ValueError, KeyError):
        return None


def _write_score(key: str, entry: dict, predictions: np.ndarray) -> None:
    put_blob_arrays(SCORES, key, entry=np.array(json.dumps(entry, default=float)), predictions=predictions)
    prune_blobs(SCORES, max_count=SCORE_FILES_KEPT)


def cached_score(shape: Shape, drawn: Truth, spec: str, rulebook: Rulebook) -> Scored | None:
    """A result already computed (by this process or a job), else None: nothing is run."""
    handle = resolve_estimator(spec)
    key = score_key(shape, drawn, handle, rulebook)
    if key not in _SCORES and _read_score(key) is None:
        return None
    return score(generate(shape), drawn, spec, rulebook)


def score(gen: GeneratedMLP, drawn: Truth, spec: str, rulebook: Rulebook) -> Scored:
    """One estimator on the MLP against ``drawn``, metered as the lab meters it; cached."""
    handle = resolve_estimator(spec)
    key = score_key(gen.shape, drawn, handle, rulebook)

    def compute() -> tuple[dict, np.ndarray]:
        stored = _read_score(key)
        if stored is not None:
            return stored
        case = MLPCase(0, gen.mlp, drawn.means, drawn.avg_variance, drawn.n_samples)
        entry, predictions = score_one(handle, case, rulebook)
        entry = json.loads(json.dumps(entry, default=float))  # what a stored result reads back as
        _write_score(key, entry, predictions)
        return entry, predictions

    entry, predictions = _SCORES.get_or_load(key, compute)
    return Scored(spec, label_for(spec, handle), entry, predictions)


def play(shape: Shape, n_samples: int, specs: Sequence[str], rulebook: Rulebook, *,
         progress: ProgressFn | None = None) -> Playground:
    """The MLP, its truth, then each estimator in turn; progress after every truth chunk and estimator.

    An estimator that cannot even be built (an upload gone from the store) is left out with its
    sentence in ``problems`` rather than failing the others.
    """
    gen = generate(shape)
    steps = 1 + len(specs)

    def on_chunk(done: int, total: int) -> None:
        if progress is not None:
            progress(f"truth: {done:,} of {total:,} chunks", done / total / steps)

    drawn = generated_truth(shape, n_samples, progress=on_chunk)
    results, problems = [], []
    for position, spec in enumerate(specs, start=1):
        if progress is not None:
            progress(f"scoring {spec}", position / steps)
        try:
            results.append(score(gen, drawn, spec, rulebook))
        except UNBUILDABLE as exc:
            problems.append(_problem(spec, exc))
    return Playground(shape, gen, drawn, rulebook, tuple(results), tuple(problems))


def _problem(spec: str, exc: Exception) -> str:
    reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return f"{spec} was left out: {reason}. Upload it again on the Upload page."


def cached_playground(shape: Shape, n_samples: int, specs: Sequence[str], rulebook: Rulebook) -> Playground | None:
    """The whole playground if every part is cached already (a job finished it), else None."""
    drawn = cached_truth(shape, n_samples)
    if drawn is None:
        return None
    results, problems = [], []
    for spec in specs:
        try:
            found = cached_score(shape, drawn, spec, rulebook)
        except UNBUILDABLE as exc:
            problems.append(_problem(spec, exc))
            continue
        if found is None:
            return None
        results.append(found)
    return Playground(shape, generate(shape), drawn, rulebook, tuple(results), tuple(problems))

