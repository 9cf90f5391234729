"""Scoring a final's (submission, MLP) pairs: jobs of the one job system, each result kept as it finishes.

A team's batch of MLPs is one job in the ``jobs`` ledger, under an id made from what it scores (the
suite, the team, the code's sha256, the MLPs asked for) and the attempt, claimed by compare-and-set
(``whestboard.jobs.run_tracked``), so two processes never score the same batch: the second waits
while the first's heartbeat goes on, takes over when it stops, and reads what it stored. The id does
not depend on which MLPs are still missing, so a process that finds a batch half done (a Celery worker
scoring it, a coordinator that stopped waiting for the workers) waits for that batch rather than
scoring its other half beside it. One sandboxed estimator
is set up for the batch, as the grader sets one up per run, and every MLP's result is written to the
artifact store the moment it is scored, under its pair's key, with the ``host:pid`` that scored it
(``scored_by``): an interrupted final (killed, or stopped by an exception) resumes with the MLPs that
have no result, and never scores a (submission, MLP) twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from whestboard.jobs import Launch, run_tracked, this_worker
from whestboard.scoring import EstimatorHandle, Rulebook, RunError, RunRequest, execute
from whestboard.store import get_blob, json_safe, put_blob

#: The artifact namespace of per-(submission, MLP) results.
PAIR_RESULTS = "final-pair-results"
JOB_KIND = "final"
#: Attempts at one pair before the final stops with the reason (each interrupted attempt is one).
MAX_ATTEMPTS = 20
#: What a pair's result keeps of the grader's per-MLP entry (the rest is per run, not per MLP).
KEPT_FIELDS = ("mlp_index", "mlp_name", "final_layer_mse", "all_layers_mse", "adjusted_final_layer_score",
               "flops_used", "effective_compute", "residual_wall_time_s", "wall_time_s", "score_multiplier",
               "failed", "failure_reason", "error_code", "avg_variance", "noise_floor", "meter_tampering",
               "whestbench_version", "flopscope_version")


@dataclass(frozen=True)
class Pair:
    """One submission on one MLP of one final's suite."""

    suite_key: str
    team: str
    code_sha256: str
    index: int

    @property
    def key(self) -> str:
        text = json.dumps([self.suite_key, self.team, self.code_sha256, self.index])
        return hashlib.sha256(text.encode()).hexdigest()[:40]


def batch_key(suite_key: str, team: str, code_sha256: str, indices: Sequence[int]) -> str:
    """The ledger's result key of one team's batch (its job ids add the attempt)."""
    text = json.dumps([suite_key, team, code_sha256, [int(i) for i in indices]])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def stored_result(pair: Pair) -> dict | None:
    """The pair's result if it was scored already (by any process, on any machine), else None."""
    data = get_blob(PAIR_RESULTS, pair.key)
    return None if data is None else json.loads(data)


def _kept(entry: dict) -> dict:
    return {k: entry.get(k) for k in KEPT_FIELDS}


def _setup_failure(suite, index: int, reason: str) -> dict:
    """The grader's verdict on an MLP whose estimator could not start: the all-zero prediction, x 1."""
    means, avg_variance = suite.truth(index)
    final = float((means[-1].astype("float64") ** 2).mean())
    return {"mlp_index": index, "mlp_name": suite.mlp_name(index), "final_layer_mse": final,
            "all_layers_mse": float((means.astype("float64") ** 2).mean()), "adjusted_final_layer_score": final,
            "flops_used": 0.0, "effective_compute": 0.0, "score_multiplier": 1.0, "failed": True,
            "failure_reason": reason, "error_code": "SETUP_ERROR", "avg_variance": avg_variance,
            "noise_floor": avg_variance / suite.n_samples}


def score_team(suite, team: str, handle: EstimatorHandle, rulebook: Rulebook, indices: Sequence[int], *,
               on_entry: Callable[[dict, bool], None] | None = None,
               score: Callable[..., object] | None = None) -> dict[int, dict]:
    """The team's result on every MLP of ``indices``, scoring only those with no stored result.

    ``on_entry(entry, scored)`` is called once per MLP: ``scored`` False for a result found stored.
    """
    run = score or execute
    pairs = {i: Pair(suite.key, team, handle.code_sha256, int(i)) for i in indices}
    results: dict[int, dict] = {}
    scorer = this_worker()
    batch = batch_key(suite.key, team, handle.code_sha256, list(pairs))

    def keep(entry: dict) -> None:
        index = int(entry["mlp_index"])
        entry = {**entry, "scored_by": scorer}
        put_blob(PAIR_RESULTS, pairs[index].key, json.dumps(json_safe(entry)).encode(),
                 meta={"team": team, "suite": suite.key, "mlp_index": index, "scored_by": scorer})
        results[index] = entry
        if on_entry is not None:
            on_entry(entry, True)

    def _found(i: int) -> bool:
        found = stored_result(pairs[i])
        if found is not None:
            results[i] = found
            if on_entry is not None:
                on_entry(found, False)
        return found is not None

    for i in pairs:
        _found(i)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        todo = [i for i in pairs if i not in results]
        if not todo:
            return results

        def compute() -> bool:
            todo = [i for i in pairs if i not in results and not _found(i)]  # a takeover: what is still left
            if not todo:
                return True
            request = RunRequest(dataset=suite, indices=todo, estimator=handle, rulebook=rulebook,
                                 source="final", team=team)
            try:
                run(request, on_progress=lambda _done, _total, entry: keep(_kept(entry)))
            except RunError as exc:  # setup() raised or the estimator could not be built: it fails them all
                for i in todo:
                    if i not in results:
                        keep(_setup_failure(suite, i, str(exc)))
            return True

        run_tracked(Launch(job_id=f"final-{batch}-{attempt}", result_key=batch, kind=JOB_KIND, owner=team),
                    compute, already_done=lambda: None)
        for i in todo:  # what another process scored meanwhile
            if i not in results:
                _found(i)
    raise RunError(f"{team}: the final's scoring of its MLPs was interrupted {MAX_ATTEMPTS} times; "
                   "see the jobs ledger for the reasons, fix the cause and run the final again")
