"""No result shipped in data/ is a busy machine's: every failed MLP of a baseline or a sweep submission is
judged by the rules (``rules.failure_kind``) from the evidence kept with it, and none is one the rules attribute
to waiting for a core (``rules.load_caused``).

And none is an older estimator's: the cheaper baselines and sweep submissions are scored again on their first
MLP and must give their stored FLOPs and MSE (``STALE`` names what an estimator's change left to re-bake).

A failure here is fixed by re-measuring on a quiet machine (load average under 1), never by editing this test:
``python -m whestboard band --dataset <round> --baseline <kind>`` for a baseline file (it scores again every
MLP whose failure is a load accident or unrecorded), ``python -m whestboard sweep --round <round> --only <key>
--again --no-store`` for a sweep submission.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from whestboard.rules import UNRECORDED, failure_kind, load_caused
from whestboard.scoring import EstimatorHandle, RunRequest, execute, rulebook_for

DATA = Path(__file__).resolve().parents[2] / "data"
BASELINE_FILES = sorted(DATA.glob("*/band/baselines/*.json"))
SUBMISSIONS = DATA / "submissions" / "baselines.csv"
PER_MLP = DATA / "submissions" / "baselines.per_mlp.csv"
MANIFEST = DATA / "submissions" / "sweep-manifest.json"


def accidents(entries: list[dict], rulebook) -> list[str]:
    """What keeps these per-MLP results from being shipped: failures the rules attribute to waiting, and
    failures whose cause the entry does not record (nothing can vouch for them)."""
    found = []
    for entry in entries:
        kind = failure_kind(entry, rulebook)
        if kind == UNRECORDED:
            found.append(f"MLP {entry['mlp_index']} failed and its entry does not record why (no flags)")
        elif kind is not None and load_caused(entry, rulebook):
            found.append(f"MLP {entry['mlp_index']} failed on {kind}, which the rules attribute to waiting: "
                         f"{entry.get('failure_reason')}")
    return found


def test_the_shipped_files_are_there():
    assert len(BASELINE_FILES) >= 14 and SUBMISSIONS.is_file() and PER_MLP.is_file() and MANIFEST.is_file()


@pytest.mark.parametrize("path", BASELINE_FILES, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_no_shipped_baseline_failed_because_the_machine_was_busy(path):
    data = json.loads(path.read_text())
    rulebook = rulebook_for(data["round_tag"], int(data["budget"]))
    assert rulebook.as_dict()["flop_budget"] == data["rulebook"]["flop_budget"]
    found = accidents(data["per_mlp"], rulebook)
    kind = data["estimator"]
    assert not found, (f"{path}: " + "; ".join(found) + f". Re-bake on a quiet machine: python -m whestboard band "
                       f"--dataset {data['dataset']} --baseline {kind}")


def test_no_shipped_submission_failed_because_the_machine_was_busy():
    """Each failed MLP of a sweep submission: its evidence in the sweep's manifest is the row's (same FLOPs,
    same verdict word), and the rules do not attribute it to waiting."""
    subs = pd.read_csv(SUBMISSIONS).set_index("submission_id")
    rows = pd.read_csv(PER_MLP)
    manifest = json.loads(MANIFEST.read_text())["entries"]
    failed = rows[rows["failed"].astype(bool)]
    problems = []
    for row in failed.itertuples():
        sid, index = row.submission_id, int(row.mlp_index)
        tag = subs.loc[sid, "round"]
        evidence = ((manifest.get(sid) or {}).get("failed_mlps") or {}).get(str(index))
        if evidence is None:
            problems.append(f"{sid} MLP {index}: failed, and the manifest keeps no evidence of why")
            continue
        entry = {**evidence, "mlp_index": index, "failed": True}
        rulebook = rulebook_for(tag)
        kind = failure_kind(entry, rulebook)
        if float(evidence["flops_used"]) != float(row.flops_used):
            problems.append(f"{sid} MLP {index}: the evidence is of another grading ({evidence['flops_used']} "
                            f"FLOPs, the row {row.flops_used})")
        if isinstance(row.failure, str) and row.failure != kind:
            problems.append(f"{sid} MLP {index}: the row says {row.failure}, the rules say {kind}")
        problems += [f"{sid} {p}" for p in accidents([entry], rulebook)]
    assert not problems, ("; ".join(problems) + ". Grade them again on a quiet machine: python -m whestboard sweep "
                          "--round <round> --only <key> --again --no-store")


class _Sleeper:
    """An estimator that waits: predict sleeps ``seconds`` (not computing), then returns zeros."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def predict(self, mlp, budget):
        import flopscope.numpy as fnp

        time.sleep(self.seconds)
        return fnp.zeros((mlp.depth, mlp.width), dtype=fnp.float32)


def test_the_check_finds_a_failure_that_waiting_caused():
    """A real run whose predict sleeps past the priced residual time of v1-warmup (C = F + 1e11 R > B) is a
    failure the rules attribute to waiting, and the check over data/ names it; the same estimator without the
    sleep is not a failure at all."""
    from whestboard.data import get_dataset

    dataset = get_dataset("v1-warmup")
    rulebook = rulebook_for("v1-warmup")
    runs = {}
    for seconds in (1.0, 0.0):
        handle = EstimatorHandle(label=f"sleeps {seconds:g} s", kind="test", code_sha256="0" * 64,
                                 factory=lambda s=seconds: _Sleeper(s))
        runs[seconds] = execute(RunRequest(dataset, "0", handle, rulebook)).report["results"]["per_mlp"]
    slept = runs[1.0][0]
    assert slept["failed"] and slept["combined_budget_exhausted"]
    found = accidents(runs[1.0], rulebook)
    assert len(found) == 1 and "attribute to waiting" in found[0]
    assert not runs[0.0][0]["failed"] and accidents(runs[0.0], rulebook) == []
    legacy = {k: v for k, v in slept.items() if k not in ("combined_budget_exhausted", "cpu_wait_s")}
    assert "does not record why" in accidents([legacy], rulebook)[0]


#: The most metered FLOPs per MLP a baseline may spend to be scored again here (a few seconds on one core).
RESCORED_UP_TO = 2e10
#: Files an estimator's change left behind, to be baked again on a quiet machine (their wall and residual times
#: count in the priced rounds' scores), each a strict expected failure until then. None now: v1-warmup's and
#: v1-phase1's K = 3 files, baked before cumulant:3 kept the square of the third-cumulant correction to the
#: mean (commit 2087790), were baked again on 2026-12-07.
STALE: set[str] = set()


def _cheap_files() -> list:
    out = []
    for path in BASELINE_FILES:
        entries = json.loads(path.read_text())["per_mlp"]
        if entries and max(float(e["flops_used"]) for e in entries) <= RESCORED_UP_TO:
            key = f"{path.parts[-4]}/{path.name}"
            out.append(pytest.param(path, id=key, marks=[pytest.mark.xfail(
                strict=True, reason="baked before its estimator changed; re-bake on a quiet machine")]
                if key in STALE else []))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", _cheap_files())
def test_a_shipped_baseline_is_what_its_estimator_computes_now(path):
    """A baseline file is the estimator's result on the embedded data, not an older estimator's: its first MLP
    scored again by the code that serves the lab gives the file's FLOPs exactly and its MSE. (An estimator that
    changes after its data was baked leaves the convergence band, compare's baselines and the lab disagreeing
    about one estimator.) Fixed by deleting the file and baking it again on a quiet machine: ``python -m
    whestboard band --dataset <round> --baseline <kind>``, and its sweep row with ``python -m whestboard sweep
    --round <round> --only <kind> --again --no-store``."""
    from whestboard.data import get_dataset
    from whestboard.scoring import resolve_estimator

    data = json.loads(path.read_text())
    first = min(data["per_mlp"], key=lambda e: int(e["mlp_index"]))
    rulebook = rulebook_for(data["round_tag"], int(data["budget"]))
    [now] = execute(RunRequest(get_dataset(data["dataset"]), str(first["mlp_index"]),
                               resolve_estimator(data["estimator"]), rulebook)).report["results"]["per_mlp"]
    assert not now["failed"], now.get("failure_reason")
    assert (now["flops_used"], now["final_layer_mse"]) == (first["flops_used"], pytest.approx(
        first["final_layer_mse"], rel=1e-6)), f"{path}: baked by another version of {data['estimator']}"


#: Sweep submissions graded by an older version of their estimator (see ``STALE``): none now.
STALE_SUBMISSIONS: set[str] = set()


def _cheap_submissions() -> list:
    from whestboard.scoring import BUILTIN_KINDS

    subs = pd.read_csv(SUBMISSIONS)
    out = []
    for row in subs.itertuples():
        key = row.submission_id.split(":", 3)[3]
        if key in BUILTIN_KINDS and float(row.mean_flops_used) <= RESCORED_UP_TO:
            out.append(pytest.param(row.submission_id, key, row.dataset, row.round, id=row.submission_id,
                                    marks=[pytest.mark.xfail(strict=True, reason="graded before its estimator "
                                                             "changed; grade again on a quiet machine")]
                                    if row.submission_id in STALE_SUBMISSIONS else []))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("submission_id", "key", "dataset", "round_tag"), _cheap_submissions())
def test_a_shipped_sweep_submission_is_what_its_estimator_computes_now(submission_id, key, dataset, round_tag):
    """The leaderboard's baseline rows likewise: the first MLP of a built-in estimator's sweep submission, scored
    again now, gives its stored FLOPs and MSE (else: ``python -m whestboard sweep --round <round> --only <key>
    --again --no-store`` on a quiet machine)."""
    from whestboard.data import get_dataset
    from whestboard.scoring import resolve_estimator

    rows = pd.read_csv(PER_MLP)
    first = rows[rows["submission_id"] == submission_id].sort_values("mlp_index").iloc[0]
    [now] = execute(RunRequest(get_dataset(dataset), str(int(first["mlp_index"])), resolve_estimator(key),
                               rulebook_for(round_tag))).report["results"]["per_mlp"]
    assert not now["failed"], now.get("failure_reason")
    assert (now["flops_used"], now["final_layer_mse"]) == (int(first["flops_used"]), pytest.approx(
        float(first["final_layer_mse"]), rel=1e-6)), f"{submission_id}: graded by another version of {key}"
