"""The baseline sweep: real estimators graded on the embedded data, recorded as submissions.

A fresh board should not be empty, and it must never show invented numbers.
So ``python -m whestboard sweep`` grades a family of estimators through the
runs core (``whestboard.scoring._runs``, i.e. ``whestbench.scoring.evaluate_estimator``
under each round's full rulebook) on every baked MLP of each round's embedded
dataset, and records each (estimator, dataset) as one submission of a clearly
labelled baseline team, with its per-MLP results.

* **Resumable and incremental**: the output CSV is rewritten after every
  entry; an entry already graded on all of the dataset's currently baked MLPs
  is skipped, one graded on fewer (the bake has progressed since) is graded
  again under the same submission id, which updates it.
* **Honest times**: a sweep submission's ``submitted_at`` is when the sweep
  finished grading it; the timeline shows when the baselines were measured.
* **Cheap first**: ``--max-seconds-per-mlp`` skips entries whose expected
  time (FLOPs the estimator will spend / this machine's measured FLOP rate)
  exceeds the limit; ``--only`` picks estimators by key.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from whestboard.data import REPO_ROOT, data_dir, served_datasets
from whestboard.leaderboard import _files, _store
from whestboard.leaderboard._store import (
    MLP_RESULT_FIELDS,
    MLP_TEXT_LIMITS,
    SUBMISSION_FIELDS,
    SUBMISSION_TEXT_LIMITS,
    MLPResult,
    Submission,
)
from whestboard.rules import ALL_ROUNDS, FAILURE_FLAGS, Round, get_round, is_failed, library_versions
from whestboard.scoring import (
    CUMULANT_KINDS,
    EstimatorHandle,
    RunRequest,
    describe_cumulant,
    execute_for_keeps,
    order3_flops,
    parse_cumulant_spec,
    resolve_estimator,
    rulebook_for,
    third_order_window,
)
from whestboard.store import write_text

BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
SHIPPED_NAME = "baselines.csv"
MANIFEST_NAME = "sweep-manifest.json"


@dataclass(frozen=True)
class SweepEstimator:
    """One member of the baseline family: who it is recorded as, and what it will spend."""

    key: str  # what --only selects
    team: str
    spec: str  # an estimator spec whestboard.scoring._estimators.resolve_estimator accepts
    label: str
    expected_flops: Callable[[Round], float]

    def resolved_spec(self) -> str:
        return str(BASELINE_DIR / self.spec) if self.spec.endswith(".py") else self.spec


MC_LADDER = (0.001, 0.01, 0.1, 0.3, 1.0)


def _mean_flops(r: Round) -> float:
    return 12.0 * r.depth * r.width * r.width


def _cov_flops(r: Round) -> float:
    return 4.0 * r.depth * r.width**3


def _cumulant_flops(kind: str) -> Callable[[Round], float]:
    """What ``cumulant:K[:VARIANT]`` will spend: the propagations' at K <= 2; at K = 3 its own planned upper
    bound at the window the round's budget buys (``whestboard.scoring.third_order_window``)."""
    order, variant = parse_cumulant_spec(kind)
    if order == 1:
        return _mean_flops
    if order == 2:
        return _cov_flops if variant != "augment" else lambda r: 1.3 * _cov_flops(r)
    return lambda r: float(order3_flops(r.width, r.depth, third_order_window(r.width, r.depth, r.budget, variant),
                                        variant))


def sweep_family() -> list[SweepEstimator]:
    """Monte Carlo at a ladder of budget fractions, both propagations, cumulant propagation at each
    order K, and two in-between variants."""
    members = [
        SweepEstimator(
            key=f"mc:{f:g}B", team="baseline: monte-carlo", spec=f"mc:{f:g}B",
            label=f"Monte Carlo, {f:g} of B in samples", expected_flops=lambda r, f=f: f * r.budget,
        )
        for f in MC_LADDER
    ]
    members += [
        SweepEstimator("mean", "baseline: mean propagation", "mean", "whestbench mean propagation", _mean_flops),
        SweepEstimator("cov", "baseline: covariance propagation", "cov", "whestbench covariance propagation",
                       _cov_flops),
        SweepEstimator("cov-half", "baseline: truncated covariance", "truncated_covariance.py",
                       "covariance propagation on the first half of the layers, mean propagation after",
                       lambda r: _cov_flops(r) / 2),
        SweepEstimator("mc-shrunk", "baseline: MC shrunk to mean propagation", "mc_shrunk_to_mean.py",
                       "1% of B of Monte Carlo shrunk toward mean propagation (empirical Bayes)",
                       lambda r: 0.01 * r.budget),
    ]
    members += [
        SweepEstimator(kind, "baseline: cumulant propagation", kind,
                       f"{describe_cumulant(kind)} (ARC's paper, metered)", _cumulant_flops(kind))
        for kind in CUMULANT_KINDS
    ]
    return members


def select(keys: Sequence[str] | None) -> list[SweepEstimator]:
    members = sweep_family()
    if not keys:
        return members
    known = {m.key: m for m in members}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"unknown sweep estimator(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [known[k] for k in keys]


def submission_id(round_tag: str, dataset_key: str, estimator_key: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.:-]+", "-", f"{dataset_key}:{estimator_key}")
    return f"baseline:{round_tag}:{slug}"


# ---------------------------------------------------------------------------
# grading one entry through the runs core
# ---------------------------------------------------------------------------


#: What the manifest keeps of each failed MLP: enough for the rules to judge its cause again
#: (``rules.failure_kind``, ``rules.load_caused``), which the submissions file has no columns for.
FAILURE_EVIDENCE = (*FAILURE_FLAGS, "error_code", "flops_used", "effective_compute", "wall_time_s",
                    "residual_wall_time_s", "predict_wait_s", "cpu_wait_s", "scoring_wall_s", "failure_reason")


def grade(member: SweepEstimator, dataset, *, on_mlp: Callable[[], None] | None = None
          ) -> tuple[Submission, list[MLPResult], float, dict[str, dict]]:
    """Score ``member`` on every baked MLP of ``dataset``: the submission, its MLPs, seconds, and each failed
    MLP's evidence (by MLP index). A failure the rules attribute to a busy machine is scored again, and
    refused (``scoring.LoadCausedFailure``) rather than recorded when it stays one."""

    handle = baseline_handle(member)
    request = RunRequest(dataset, dataset.indices, handle, rulebook_for(dataset.info.round_tag),
                              source="sweep", team=member.team)
    started = time.perf_counter()
    outcome = execute_for_keeps(request, on_progress=(lambda *_: on_mlp()) if on_mlp else None)
    seconds = time.perf_counter() - started
    sub, mlps = from_run_report(outcome.report, member, dataset)
    failures = {str(e["mlp_index"]): {k: e.get(k) for k in FAILURE_EVIDENCE}
                for e in outcome.report["results"]["per_mlp"] if is_failed(e)}
    return sub, mlps, seconds, failures


def baseline_handle(member: SweepEstimator):
    """The estimator handle: built-ins and Monte Carlo by spec; our own baseline files in-process.

    ``resolve_estimator`` sends every file to the upload sandbox, which is for
    participants' code. The baseline variants ship in this repository, so they
    are loaded with whestbench's own loader and run in this process, exactly
    like the built-in baselines (same timing and residual-time conditions).
    """

    if not member.spec.endswith(".py"):
        return resolve_estimator(member.spec)
    import hashlib

    from whestbench.loader import load_estimator_from_path, resolve_estimator_class_metadata

    path = Path(member.resolved_spec())
    meta = resolve_estimator_class_metadata(path)
    return EstimatorHandle(
        label=member.key,
        kind="baseline-file",
        code_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        factory=lambda: load_estimator_from_path(path)[0],
        description=f"{meta.class_name} from whestboard/baselines/{path.name} (in-process)",
        class_name=meta.class_name,
        submission_dir=str(path.parent),
    )


def from_run_report(report: dict, member: SweepEstimator, dataset) -> tuple[Submission, list[MLPResult]]:
    """A runs-core report as a submission, through the same parser a ``whest run --json`` import uses."""
    sid = submission_id(dataset.info.round_tag, dataset.info.key, member.key)
    sub, mlps, problems = _files.parse_run_report(
        report, f"sweep {member.key} on {dataset.info.key}", team=member.team, submission_id=sid,
        round_tag=dataset.info.round_tag, flopscope_version=report["versions"]["flopscope_version"],
    )
    if problems:
        raise ValueError("; ".join(problems))
    variances = {int(e["mlp_index"]): float(e["avg_variance"]) for e in report["results"]["per_mlp"]}
    mlps = [replace(m, avg_variance=variances[m.mlp_index]) for m in mlps]
    sub = replace(
        sub,
        dataset=dataset.info.key,
        mean_avg_variance=float(report["mc_reference"]["mean_avg_variance"]),
        estimator=f"{member.spec}: {member.label}",
        source="sweep",
    )
    return sub, mlps


# ---------------------------------------------------------------------------
# the output files (the shipped CSV + per-MLP sibling)
# ---------------------------------------------------------------------------


def read_output(out: Path) -> tuple[dict[str, Submission], dict[str, list[MLPResult]]]:
    """What a previous sweep wrote (empty when the file is not there)."""
    if not out.is_file():
        return {}, {}
    batch = _files.load_batch([out])
    if batch.problems:
        raise ValueError(f"{out} is not a valid submissions file:\n  " + "\n  ".join(batch.problems))
    mlps: dict[str, list[MLPResult]] = {}
    for res in batch.mlp_results:
        mlps.setdefault(res.submission_id, []).append(res)
    return {s.submission_id: s for s in batch.submissions}, mlps


def write_output(out: Path, subs: dict[str, Submission], mlps: dict[str, list[MLPResult]]) -> None:
    """Both CSVs in the import schema, written atomically (a killed sweep leaves the old files)."""
    import pandas as pd


    out.parent.mkdir(parents=True, exist_ok=True)
    ordered = sorted(subs.values(), key=lambda s: (s.round, s.submitted_at, s.submission_id))
    table = pd.DataFrame([{f: getattr(s, f) for f in SUBMISSION_FIELDS} for s in ordered],
                         columns=list(SUBMISSION_FIELDS))
    table["submitted_at"] = table["submitted_at"].map(_files.iso_time)
    per_mlp = pd.DataFrame(
        [{f: getattr(m, f) for f in MLP_RESULT_FIELDS} for s in ordered for m in mlps.get(s.submission_id, [])],
        columns=list(MLP_RESULT_FIELDS),
    )
    per_mlp_path = out.with_name(out.stem + _files.PER_MLP_SUFFIX + ".csv")
    for path, frame, text in ((out, table, SUBMISSION_TEXT_LIMITS), (per_mlp_path, per_mlp, MLP_TEXT_LIMITS)):
        write_text(path, _files.csv_text(frame, text))  # the export's formula escape


# ---------------------------------------------------------------------------
# the plan and the loop
# ---------------------------------------------------------------------------


@dataclass
class PlannedEntry:
    member: SweepEstimator
    dataset: object
    expected_seconds_per_mlp: float
    action: str  # "grade", "regrade", "done", "too slow"


@functools.cache
def measured_flop_rate(seconds: float = 0.3) -> float:
    """FLOPs per second of a float32 matmul here: the basis of the time estimate. Measured once per
    process: the machine does not change between sweeps, and each measurement busy-loops ``seconds``."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ a
        done += 2 * 512**3
    return done / (time.perf_counter() - start)


def plan(
    datasets: Sequence,
    members: Sequence[SweepEstimator],
    existing: dict[str, Submission],
    *,
    max_seconds_per_mlp: float | None,
    flop_rate: float,
    again: bool = False,
) -> list[PlannedEntry]:
    """What each (dataset, member) needs; ``again`` grades finished entries again (a re-measure)."""
    entries = []
    for ds in datasets:
        rnd = ds.info.round
        for member in members:
            expected = member.expected_flops(rnd) / flop_rate
            sid = submission_id(rnd.tag, ds.info.key, member.key)
            old = existing.get(sid)
            if old is not None and old.n_mlps == len(ds.indices) and not again:  # every readable MLP
                action = "done"
            elif max_seconds_per_mlp is not None and expected > max_seconds_per_mlp:
                action = "too slow"
            else:
                action = "regrade" if old is not None else "grade"
            entries.append(PlannedEntry(member, ds, expected, action))
    return entries


def sweep_datasets(round_tags: Sequence[str] | None, log: Callable[[str], None] = print) -> list:
    """Each round's embedded dataset (the folder named after the round), MLPs as baked so far."""

    tags = [get_round(t).tag for t in round_tags] if round_tags else list(ALL_ROUNDS)
    served = served_datasets()
    missing = [t for t in tags if t not in served or not served[t].info.n_mlps]
    found = [served[t] for t in tags if t not in missing]
    for tag in missing:
        log(f"skipping round {tag}: no baked MLPs in {data_dir() / tag} yet")
    if not found:
        raise ValueError(f"no embedded dataset with baked MLPs for round(s) {', '.join(missing)} under "
                         f"{data_dir()}; bake them first (scripts/bake_embedded.sh)")
    return found


def run_sweep(
    *,
    out: Path,
    round_tags: Sequence[str] | None = None,
    only: Sequence[str] | None = None,
    max_seconds_per_mlp: float | None = None,
    to_store: bool = True,
    dry_run: bool = False,
    show_progress: bool = True,
    again: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Grade every planned entry, saving after each; returns the timings manifest."""
    from tqdm import tqdm

    members = select(only)
    datasets = sweep_datasets(round_tags, log)
    subs, mlps = read_output(out)
    rate = measured_flop_rate()
    entries = plan(datasets, members, subs, max_seconds_per_mlp=max_seconds_per_mlp, flop_rate=rate, again=again)
    for e in entries:
        log(f"{e.action:9s} {e.dataset.info.key:10s} {e.member.key:10s} "
            f"~{e.expected_seconds_per_mlp:8.2f} s/MLP x {e.dataset.info.n_mlps} MLPs")
    todo = [e for e in entries if e.action in ("grade", "regrade")]
    manifest = _load_manifest(out)
    if dry_run or not todo:
        log(f"{len(todo)} entries to grade" + (" (dry run)" if dry_run else ""))
        return manifest
    total = sum(e.dataset.info.n_mlps for e in todo)
    bar = tqdm(total=total, unit="MLP", desc="sweep", disable=not show_progress, file=sys.stderr)
    try:
        for e in todo:
            bar.set_postfix_str(f"{e.dataset.info.key} {e.member.key}")
            sub, results, seconds, failures = grade(e.member, e.dataset, on_mlp=lambda: bar.update(1))
            subs[sub.submission_id], mlps[sub.submission_id] = sub, results
            write_output(out, subs, mlps)
            if to_store:

                _store.upsert([sub], results)
            manifest["entries"][sub.submission_id] = {
                "command": _command_line(),
                "dataset": e.dataset.info.key, "estimator": e.member.key, "n_mlps": len(results),
                "seconds": round(seconds, 3), "seconds_per_mlp": round(seconds / max(1, len(results)), 3),
                "graded_at": sub.submitted_at.isoformat(),
                "failed_mlps": failures,
            }
            manifest["last_command"] = _command_line()
            manifest["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                   "measured_matmul_flops_per_s": rate}
            _save_manifest(out, manifest)
            log(f"graded {sub.submission_id}: score {sub.adjusted_score:.4g}, MSE {sub.final_layer_mse:.4g}, "
                f"{sub.n_failed_mlps} failed MLPs, {seconds:.1f} s")
    finally:
        bar.close()
    return manifest


def _command_line() -> str:
    """The command that is grading, as a person would retype it."""
    if sys.argv[1:2] == ["sweep"]:
        return " ".join(["python -m whestboard sweep", *sys.argv[2:]])
    return "whestboard.leaderboard._sweep.run_sweep (called from Python)"


def _manifest_path(out: Path) -> Path:
    return out.with_name(MANIFEST_NAME)


def _load_manifest(out: Path) -> dict:
    path = _manifest_path(out)
    if path.is_file():
        data = json.loads(path.read_text())
        data.setdefault("entries", {})
        return data
    return {"entries": {}}


def _save_manifest(out: Path, manifest: dict) -> None:

    manifest["versions"] = library_versions()
    write_text(_manifest_path(out), json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def default_output() -> Path:

    return REPO_ROOT / "data" / "submissions" / SHIPPED_NAME
