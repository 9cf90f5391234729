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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from whestboard.cache import Region
from whestboard.data import (
    GeneratedMLP,
    Shape,
    Truth,
    cached_truth,
    default_samples,
    generate,
    generated_truth,
    needs_background,
    parse_samples,
    parse_shape,
    playground_work,
    truth_work,
)
from whestboard.jobs import sandbox_turn
from whestboard.rules import ALL_ROUNDS, CapMargins, Caps, cap_margins, library_versions, telemetry_of
from whestboard.scoring._estimators import builtin_choices, resolve_estimator
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import RunError, quoted
from whestboard.scoring._rulebook import Rulebook, rulebook_for
from whestboard.scoring._runs import MLPCase, score_one
from whestboard.scoring._served import is_sandboxed_spec, served_spec
from whestboard.store import get_blob_arrays, prune_blobs, put_blob_arrays

BUILTIN_SPECS = ("mean", "cov", "combined", "cumulant:3", "cumulant:3:simple", "cumulant:3:augment-factored",
                 "cumulant:3:augment")
#: The table's names: a cumulant variant is named as the lab's menu and the convergence legend name it
#: (``builtin_choices``), only its first letter lowered to sit among the others.
BUILTIN_LABELS = {"mean": "mean propagation", "cov": "covariance propagation", "combined": "combined",
                  **{c["value"]: c["label"][:1].lower() + c["label"][1:] for c in builtin_choices()
                     if c["value"] in BUILTIN_SPECS and c["value"].startswith("cumulant:")}}
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


#: The most uploads one playground job scores beside the built-ins.
MAX_PLAYGROUND_UPLOADS = 4
#: The lowest Monte Carlo sample count the playground offers (its slider's first stop).
MIN_MC_SAMPLES = 10
AUTO = "auto"


@dataclass(frozen=True)
class PlaygroundRequest:
    """One playground view as asked: the MLP, its truth samples, Monte Carlo's samples, the round and the
    uploads scored beside the built-ins. Parsed once by :func:`parse_playground` from the controls, a
    store or a job's payload (each the same way), priced by :attr:`cost`, carried as :meth:`payload`."""

    shape: Shape
    samples: int
    samples_auto: bool
    mc: int
    round_tag: str | None = None
    uploads: tuple[str, ...] = ()

    @property
    def specs(self) -> list[str]:
        return estimator_specs(self.mc, self.uploads)

    @property
    def rulebook(self) -> Rulebook:
        return rulebook_for_shape(self.shape, self.round_tag)

    @property
    def cost(self) -> float:
        """The truth and every built-in (``playground_work``), plus each upload's FLOP budget B on the MLP:
        what a job is priced at before it runs."""
        return playground_work(self.shape, self.samples, self.mc) + len(self.uploads) * float(self.rulebook.flop_budget)

    @property
    def keep_cost(self) -> float:
        """What keeping the MLP costs: its truth alone."""
        return truth_work(self.shape, self.samples)

    @property
    def quick(self) -> bool:
        """Answered inside the page's request: no upload, and about a second of work at most."""
        return not self.uploads and not needs_background(self.shape, self.samples, self.mc)

    def payload(self) -> dict:
        return {"width": self.shape.width, "depth": self.shape.depth, "seed": str(self.shape.seed),
                "samples": AUTO if self.samples_auto else self.samples, "mc": self.mc, "round": self.round_tag,
                "uploads": list(self.uploads)}


def _uploads(value: object, allowed: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise RunError(f"the uploads {quoted(value)} are not a list of upload hashes")
    if len(value) > MAX_PLAYGROUND_UPLOADS:
        raise RunError(f"{len(value):,} uploads at once: the playground scores at most {MAX_PLAYGROUND_UPLOADS} "
                       "beside the built-ins")
    specs = [served_spec(f"upload:{v}" if isinstance(v, str) else v, uploads=allowed) for v in value]
    return tuple(dict.fromkeys(spec.split(":", 1)[1] for spec in specs))


def parse_playground(values: object, *, uploads: bool) -> PlaygroundRequest:
    """A playground request from ``{"width", "depth", "seed", "samples", "mc", "round", "uploads"}``: the
    controls (``samples`` may be ``"auto"``), a store or a job's payload. ``uploads``: whether this
    server runs uploaded code (a request naming one where it does not is refused, never quietly cut).
    GeneratedMLPError or RunError (both ValueErrors) name the field to fix."""
    if not isinstance(values, Mapping):
        raise RunError(f"the playground's controls {quoted(values)} are not what this page sends; reload the page")
    shape = parse_shape(values.get("width"), values.get("depth"), values.get("seed"))
    raw = values.get("samples")
    auto = raw in (None, "", AUTO)
    samples = default_samples(shape.width, shape.depth) if auto else parse_samples(raw)
    mc = parse_samples(values.get("mc"), "Monte Carlo samples", low=MIN_MC_SAMPLES)
    tag = values.get("round")
    if tag in ("", AUTO):
        tag = None
    if tag is not None and (not isinstance(tag, str) or tag not in ALL_ROUNDS):
        raise RunError(f"round {quoted(tag)} is not one of {', '.join(ALL_ROUNDS)}")
    return PlaygroundRequest(shape, samples, auto, mc, tag, _uploads(values.get("uploads"), uploads))


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


def score(gen: GeneratedMLP, drawn: Truth, spec: str, rulebook: Rulebook, *,
          on_wait: Callable[[], None] | None = None) -> Scored:
    """One estimator on the MLP against ``drawn``, metered as the lab meters it; cached.

    Code run in the sandbox (an upload) runs only while this job holds one of the machine's sandbox
    slots (``jobs.sandbox_turn``: the upload queue's one-at-a-time rule); ``on_wait`` is called while
    another sandbox has it.
    """
    handle = resolve_estimator(spec)
    key = score_key(gen.shape, drawn, handle, rulebook)

    def compute() -> tuple[dict, np.ndarray]:
        stored = _read_score(key)
        if stored is not None:
            return stored
        case = MLPCase(0, gen.mlp, drawn.means, drawn.avg_variance, drawn.n_samples)
        if is_sandboxed_spec(spec):
            with sandbox_turn(on_wait=on_wait):
                entry, predictions = score_one(handle, case, rulebook)
        else:
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

        def waiting(_spec: str = spec, _at: float = position / steps) -> None:
            if progress is not None:
                progress(f"waiting for the sandbox (another upload is being scored) before {_spec}", _at)

        try:
            results.append(score(gen, drawn, spec, rulebook, on_wait=waiting))
        except UNBUILDABLE as exc:
            problems.append(_problem(spec, exc))
    return Playground(shape, gen, drawn, rulebook, tuple(results), tuple(problems))


def playground_margins(result: Playground) -> CapMargins:
    """Each estimator's margin to each cap of the round's rulebook on this MLP (``rules.cap_margins``): one
    item per estimator, its own setup() time beside its predict's."""
    return cap_margins([telemetry_of(s.entry, label=s.label) for s in result.results], Caps.of(result.rulebook))


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

