"""The two things compared, loaded into one shape: per-MLP results keyed by MLP index, maybe predictions.

A side is named by an id (the compare page's URL and the CLI take the same ones):

* ``run:<run id>``: a run of the run store (lab, CLI, upload or sweep): per-MLP results and, when
  it stored them, the predictions its MSEs were computed from;
* ``sub:<submission id>``: an imported submission that carries per-MLP results;
* ``base:<dataset key>:<estimator>``: a white-box baseline (``mean``, ``cov``) scored on a dataset;
* (CLI only) the path of a ``python -m whestboard score --json`` report.

Two sides are paired on the MLPs both were scored on, matched by dataset and MLP index: the same MLP
against the same reference.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import select

from whestboard.band import BASELINE_LABELS, load_baselines
from whestboard.cache import Region
from whestboard.data import get_dataset, served_datasets
from whestboard.leaderboard import (
    PUBLIC,
    SubmissionMLPRow,
    SubmissionRow,
    board_revision,
    get_submission,
    mlp_frame,
)
from whestboard.rules import failure_kind, get_round
from whestboard.scoring import (
    RunError,
    get_run,
    get_run_predictions,
    is_file_spec,
    kept_target,
    list_runs,
    resolve_run_id,
    runs_revision,
    served_handle,
    served_spec,
)
from whestboard.store import sci, session

KINDS = {"run": "run", "sub": "submission", "base": "baseline"}
ID_HELP = ("run:<run id> (or its first 8 characters, as the pages and `runs` show it), sub:<submission id> or "
           "base:<dataset key>:<mean|cov>")
#: Reports read from files are small JSON documents; anything larger is not one.
MAX_REPORT_BYTES = 64 * 1024 * 1024
#: The lists a page offers are cut to this many entries of each kind (newest first).
MAX_LISTED = 300
#: Which per-MLP results of a submission are paired: the public suite (private and rerun are the organizer's).
PAIRED_SPLITS = (PUBLIC,)


class CompareError(ValueError):
    """Something the user named cannot be compared; the message says what to change."""


@dataclass
class Side:
    """One thing compared: its per-MLP results (index -> entry) and where they came from."""

    side_id: str
    label: str
    kind: str  # run, submission, baseline, report
    dataset_key: str | None
    round_tag: str | None
    n_reference_samples: int | None
    entries: dict[int, dict]  # mlp_index -> {final_layer_mse, adjusted_score, avg_variance, mlp_name, ...}
    predictions: dict[int, np.ndarray] = field(default_factory=dict)  # mlp_index -> (depth, width)
    dataset_path: str | None = None  # where a run's dataset was read from, for one the app does not serve
    environment: dict | None = None  # the BLAS the run was computed with (rules.versions), when recorded
    #: the estimator spec a budget curve of this side sweeps (a built-in, Monte Carlo or a baseline); None for
    #: code only its author has (an upload, an imported submission)
    curve_spec: str | None = None

    def describe(self) -> dict:
        return {"id": self.side_id, "label": self.label, "kind": self.kind, "dataset": self.dataset_key,
                "round": self.round_tag, "n_mlps": len(self.entries), "n_reference_samples": self.n_reference_samples,
                "has_predictions": bool(self.predictions)}


def _number(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def normalized_entry(entry: dict) -> dict:
    """A per-MLP result in the one shape compared: runs and baselines say ``adjusted_final_layer_score``,
    submissions ``adjusted_score``."""
    score = entry.get("adjusted_final_layer_score", entry.get("adjusted_score"))
    per_layer = entry.get("per_layer_mse")
    return {
        "mlp_name": entry.get("mlp_name") or "",
        "final_layer_mse": _number(entry.get("final_layer_mse")),
        "adjusted_score": _number(score),
        "avg_variance": _number(entry.get("avg_variance")),
        "failed": bool(entry.get("failed")),
        "failure": failure_kind(entry),  # the verdict word of a failed MLP (rules.failure_kind), None when it ran
        "per_layer_mse": [float(x) for x in per_layer] if isinstance(per_layer, list) else None,
    }


def _entries(per_mlp) -> dict[int, dict]:
    return {int(e["mlp_index"]): normalized_entry(e) for e in per_mlp or []}


def _served_samples(dataset_key: str | None) -> int | None:
    ds = served_datasets().get(dataset_key or "")
    return int(ds.info.n_samples) if ds is not None else None


def curve_spec_of(estimator: dict | None) -> str | None:
    """The spec that sweeps the estimator a run recorded (``report["estimator"]``): its label, when that
    names the very same built-in or Monte Carlo code here (same code hash); None for a file or an upload,
    which runs only in the sandbox and whose code a budget curve here cannot name."""
    label = (estimator or {}).get("label")
    if not isinstance(label, str) or not label or is_file_spec(label):
        return None
    try:  # what a page may name (never a path looked up for a visitor); sandboxed code has no curve here
        served = served_spec(label, uploads=False)
        if kept_target(served) is not None:
            return None
        handle = served_handle(served, uploads=False)
    except ValueError:
        return None
    return label if handle.code_sha256 == (estimator or {}).get("code_sha256") else None


def side_id_parts(side_id: str) -> tuple[str, list[str]]:
    """(kind prefix, the rest split on ':') of an id, or CompareError saying what an id looks like."""
    text = (side_id or "").strip()
    prefix, _, rest = text.partition(":")
    if prefix not in KINDS or not rest:
        raise CompareError(f"{text!r} is not something to compare: give {ID_HELP}")
    if prefix == "base":
        kind = next((k for k in sorted(BASELINE_LABELS, key=len, reverse=True) if rest.endswith(f":{k}")), "")
        key = rest[: -len(kind) - 1] if kind else ""
        if not key or kind not in BASELINE_LABELS:
            raise CompareError(f"{text!r}: a baseline is base:<dataset key>:<{'|'.join(BASELINE_LABELS)}>")
        return prefix, [key, kind]
    return prefix, [rest]


def load_side(side_id: str) -> Side:
    """The side an id names (``ID_HELP``), or CompareError naming what was not found."""
    prefix, parts = side_id_parts(side_id)
    if prefix == "run":
        return _run_side(parts[0])
    if prefix == "sub":
        return _submission_side(parts[0])
    return _baseline_side(*parts)


def _run_side(run_id: str) -> Side:
    try:  # a full id, or the 8-character start the pages show when it names one run
        run_id = resolve_run_id(run_id) or run_id
    except RunError as exc:
        raise CompareError(str(exc)) from None
    report = get_run(run_id)
    if report is None:
        raise CompareError(f"no run {run_id!r} in the run store: `python -m whestboard runs` lists them (the lab "
                           "and convergence pages show them too)")
    dataset = report.get("dataset") or {}
    estimator = report.get("estimator") or {}
    label = f"{estimator.get('label') or 'run'} · {(report.get('source') or 'run')} {run_id[:8]}"
    return Side(f"run:{run_id}", label, "run", dataset.get("key"), (report.get("rulebook") or {}).get("round_tag"),
                dataset.get("n_samples"), _entries((report.get("results") or {}).get("per_mlp")),
                get_run_predictions(run_id), dataset.get("path"), report.get("environment"),
                curve_spec_of(estimator))


def _submission_side(submission_id: str) -> Side:
    sub = get_submission(submission_id)
    if sub is None:
        raise CompareError(f"no submission {submission_id!r}: see the leaderboard for submission ids")
    # The public split only: private and rerun results are the organizer's (the leaderboard's rule), and
    # one split is one suite, so an MLP index names one result.
    frame = mlp_frame([submission_id], splits=PAIRED_SPLITS)
    if frame.empty:
        raise CompareError(f"submission {submission_id!r} carries no per-MLP results, so it cannot be paired; "
                           "import its per-MLP file (see docs/leaderboard.md)")
    return Side(f"sub:{submission_id}", f"{sub.team} · {sub.estimator or submission_id}", "submission", sub.dataset,
                sub.round, _served_samples(sub.dataset), _entries(frame.to_dict("records")))


def _baseline_side(dataset_key: str, kind: str) -> Side:
    try:
        ds = get_dataset(dataset_key)
    except KeyError as exc:
        raise CompareError(f"no served dataset {dataset_key!r}: see python -m whestboard datasets") from exc
    found = load_baselines(ds).get(kind)
    if found is None:
        raise CompareError(f"{BASELINE_LABELS[kind]} has not been scored on {dataset_key}: "
                           f"python -m whestboard band --dataset {dataset_key} computes it")
    return Side(f"base:{dataset_key}:{kind}", f"{BASELINE_LABELS[kind]} · {dataset_key}", "baseline", dataset_key,
                ds.info.round_tag, int(ds.info.n_samples), _entries(found.per_mlp), curve_spec=kind)


def load_report_file(path: str | Path) -> Side:
    """A side from a ``score --json`` report file (or a stored run's report); CompareError if it is none."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise CompareError(f"{path} is larger than {MAX_REPORT_BYTES // 2**20} MiB: not a score --json report")
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{path} could not be read as a score --json report: {exc}") from exc
    extras = data.get("whestboard") if isinstance(data, dict) and isinstance(data.get("whestboard"), dict) else data
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict) or not isinstance(results.get("per_mlp"), list):
        raise CompareError(f"{path} has no results.per_mlp: give a report written by "
                           "python -m whestboard score --json")
    dataset = extras.get("dataset") if isinstance(extras.get("dataset"), dict) else {}
    try:
        entries = _entries(results["per_mlp"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CompareError(f"{path}: a per-MLP entry has no usable mlp_index ({exc})") from exc
    estimator = extras.get("estimator") if isinstance(extras.get("estimator"), dict) else {}
    run_id = extras.get("run_id")
    predictions = get_run_predictions(run_id) if isinstance(run_id, str) and run_id else {}
    return Side(f"file:{path}", f"{estimator.get('label') or path.name} · {path.name}", "report",
                dataset.get("key"), (extras.get("rulebook") or {}).get("round_tag"), dataset.get("n_samples"),
                entries, predictions, dataset.get("path"),
                extras.get("environment") if isinstance(extras.get("environment"), dict) else None,
                curve_spec_of(estimator))


def shared_indices(a: Side, b: Side) -> list[int]:
    """MLP indices scored by both against the same reference (same dataset), finite on both sides."""
    if a.dataset_key and b.dataset_key and a.dataset_key != b.dataset_key:
        return []
    return sorted(i for i in set(a.entries) & set(b.entries)
                  if all(math.isfinite(s.entries[i][k]) for s in (a, b) for k in ("final_layer_mse", "adjusted_score")))


# ---------------------------------------------------------------------------
# what the page offers
# ---------------------------------------------------------------------------


def candidates(first: Side | None = None) -> list[dict]:
    """Everything that could be compared, as ``{"id", "label", "kind", "dataset", "n_mlps"}`` (newest runs first).

    With ``first``, only what shares at least one MLP with it (same dataset, overlapping indices),
    ``first`` itself left out.
    """
    dataset = first.dataset_key if first is not None else None
    wanted = set(first.entries) if first is not None else None
    out = _run_candidates(dataset, wanted) + _baseline_candidates(dataset, wanted)
    out += _submission_candidates(dataset, wanted)
    return [c for c in out if first is None or c["id"] != first.side_id]


def _run_candidates(dataset: str | None, wanted: set[int] | None) -> list[dict]:
    out = []
    for run in list_runs(dataset_key=dataset):
        if wanted is not None and not wanted.intersection(run["mlp_indices"]):
            continue
        out.append({"id": f"run:{run['run_id']}", "kind": "run", "dataset": run["dataset_key"],
                    "n_mlps": run["n_mlps"],
                    "label": f"{run['estimator_label']} · {run['source']} run {run['run_id'][:8]} · "
                             f"{run['dataset_key']} · {run['n_mlps']} MLPs{_custom_budget(run)} · "
                             f"{run['created_at'][:16]}"})
        if len(out) >= MAX_LISTED:
            break
    return out


def _custom_budget(run: dict) -> str:
    """" · B = 6.8e+08" for a run under a budget other than its round's (a budget curve's point), else "": the
    runs of one curve are the same estimator on the same MLPs, told apart only by B."""
    try:
        budget, round_budget = run.get("budget"), get_round(run["round_tag"]).budget
    except (KeyError, TypeError, ValueError):
        return ""
    return f" · B = {sci(budget)}" if budget and budget != round_budget else ""


def _baseline_candidates(dataset: str | None, wanted: set[int] | None) -> list[dict]:
    out = []
    for key, ds in served_datasets().items():
        if dataset is not None and key != dataset:
            continue
        for kind, result in load_baselines(ds).items():
            if wanted is not None and not wanted.intersection(result.indices):
                continue
            out.append({"id": f"base:{key}:{kind}", "kind": "baseline", "dataset": key, "n_mlps": len(result.per_mlp),
                        "label": f"{result.label} · baseline · {key} · {len(result.per_mlp)} MLPs"})
    return out


def _submission_candidates(dataset: str | None, wanted: set[int] | None) -> list[dict]:
    """Submissions with per-MLP results; filtered in SQL, so a store of 10,000 never comes back whole."""
    subs, rows = SubmissionRow.__table__, SubmissionMLPRow.__table__
    query = (select(subs.c.id, subs.c.team, subs.c.estimator, subs.c.dataset, subs.c.n_mlps)
             .where(subs.c.id.in_(select(rows.c.submission_id).where(rows.c.split.in_(PAIRED_SPLITS)).distinct()))
             .order_by(subs.c.submitted_at.desc(), subs.c.id).limit(MAX_LISTED))
    if dataset is not None:
        query = query.where(subs.c.dataset == dataset)
    if wanted is not None:
        query = query.where(subs.c.id.in_(select(rows.c.submission_id)
                                          .where(rows.c.split.in_(PAIRED_SPLITS),
                                                 rows.c.mlp_index.in_(sorted(wanted)[:5000]))))
    with session() as s:
        found = s.execute(query).all()
    return [{"id": f"sub:{sid}", "kind": "submission", "dataset": ds_key, "n_mlps": n,
             "label": f"{team} · {estimator or sid} · submission · {ds_key or 'no dataset'}"}
            for sid, team, estimator, ds_key, n in found]


def resolve_side(text: str) -> Side:
    """What the CLI is given: a ``score --json`` file, a prefixed id, or a bare run or submission id."""
    text = (text or "").strip()
    prefix = text.partition(":")[0]
    if prefix in KINDS:
        return load_side(text)
    if Path(text).expanduser().is_file():
        return load_report_file(Path(text).expanduser())
    try:
        run_id = resolve_run_id(text)
    except RunError as exc:
        raise CompareError(str(exc)) from None
    if run_id is not None:
        return _run_side(run_id)
    if get_submission(text) is not None:
        return _submission_side(text)
    raise CompareError(f"{text!r} is neither a file, a run id nor a submission id: give a score --json report "
                       f"or {ID_HELP}")


def _side_bytes(side: Side) -> int:
    return 4096 + sum(int(p.nbytes) for p in side.predictions.values())


#: Sides loaded for the page, by (id, store revisions): a 1000-MLP run at 1024 x 16 holds 64 MiB of predictions.
SIDE_CACHE: Region[Side] = Region("compare-sides", share=1 / 4, size_of=_side_bytes)


def stores_revision() -> str:
    """Changes when a run is recorded or a submission written: what loaded sides are cached under."""
    return f"{runs_revision()}|{board_revision()}"


def cached_side(side_id: str) -> Side:
    """``load_side`` once per process and store revision (the page asks for the same two sides repeatedly)."""
    return SIDE_CACHE.get_or_load((side_id, stores_revision()), lambda: load_side(side_id))
