"""A final's team batches handed to Celery workers, and the coordinator's bounded wait for them.

With ``WHESTBOARD_REDIS_URL`` set, ``run_final`` sends each team's batch (its MLPs of one phase: the
base suite, or a close group's extra MLPs) to the job system's Celery workers as one task
(``whestboard.jobs.spread``), so a final spreads over every machine that runs ``celery -A worker
worker`` on the shared store. A task's payload is JSON: the round, the suite's seed, length and
reference samples, the team, its package as ``upload:SHA256`` (a nominee given as a local path is put
into the artifact store first, as an upload) and the MLP indices; the worker rebuilds the suite (the
references come from the artifact store, where the coordinator baked them) and scores the batch with
:func:`whestboard.final._scoring.score_team`, the very function the coordinator runs.

The coordinator waits while the workers show progress (pair results appear, or a batch's ledger row
heartbeats), reporting the stored results as they come; then it runs its own loop, which finds every
stored result and scores only what is missing. Nothing is ever scored twice: a batch is claimed in the
ledger by compare-and-set, and a pair's result is looked up before it is scored. So a dead worker, a
lost broker, or no worker at all costs time (at most ``WHESTBOARD_FINAL_WORKER_IDLE_S`` of silence),
never a pair scored twice, and never a final left unfinished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from whestboard import config, logs
from whestboard.final._scoring import PAIR_RESULTS, Pair, batch_key, score_team
from whestboard.final._suite import FinalSuite
from whestboard.jobs import STALE_AFTER_S, celery_app, find_job, owner_alive, register_body, spread
from whestboard.rules import get_round
from whestboard.scoring import (
    EstimatorHandle,
    RunError,
    rulebook_for,
    sandboxed_handle,
    served_spec,
    stored_spec,
)
from whestboard.store import stored_blob_keys

#: The job body's kind: one team's batch of one final.
FINAL_TEAM = "final-team"
POLL_S = 1.0


def workers_configured() -> bool:
    """Celery workers may take the final's batches (``WHESTBOARD_REDIS_URL`` is set)."""
    return celery_app() is not None


def worker_specs(specs: dict[str, str]) -> dict[str, str]:
    """Each team's package as a worker on another machine reaches it: ``upload:SHA256``, a local path's
    package put into the artifact store first (the upload store the page and the CLI use)."""
    return {team: stored_spec(spec) for team, spec in specs.items()}


def batch_payload(suite: FinalSuite, team: str, handle: EstimatorHandle, spec: str,
                  indices: Sequence[int]) -> dict:
    """What a worker needs to score ``team`` on ``indices`` of ``suite``, as JSON."""
    return {"round": suite.round.tag, "suite_seed": suite.suite_seed, "n_mlps": max(indices) + 1,
            "truth_samples": suite.n_samples, "team": team, "spec": spec, "code_sha256": handle.code_sha256,
            "indices": [int(i) for i in indices]}


def score_batch(payload: dict) -> dict:
    """The body a Celery worker runs: rebuild the suite and the team's handle, score the batch.

    The payload comes through the broker, so its package is read as a page's spec is: ``upload:SHA256``
    (what :func:`worker_specs` sends) and never a path, which would have the worker's sandbox look up, and
    store, whatever folder a writer of the broker named."""
    rnd = get_round(payload["round"])
    spec = served_spec(payload["spec"], uploads=True)
    if not spec.startswith("upload:"):
        raise RunError(f"{payload['team']}: a final's batch names its package as upload:SHA256, not {spec!r}")
    suite = FinalSuite(rnd, payload["suite_seed"], payload["n_mlps"], payload["truth_samples"])
    handle = sandboxed_handle(spec, round_tag=rnd.tag)
    if handle.code_sha256 != payload["code_sha256"]:
        raise RunError(f"{payload['team']}: the package {payload['spec']} has sha256 {handle.code_sha256}, "
                       f"not the nominee's {payload['code_sha256']}")
    found = score_team(suite, payload["team"], handle, rulebook_for(rnd.tag), payload["indices"])
    return {"team": payload["team"], "results": len(found)}


register_body(FINAL_TEAM, score_batch)


def dispatch(suite: FinalSuite, teams: Sequence[str], indices: Sequence[int], handles: dict[str, EstimatorHandle],
             specs: dict[str, str], *, report: Callable[[int, int], None]) -> dict:
    """Send each team's batch to the workers and wait while they make progress; what happened.

    ``specs`` is each team's package as the workers reach it (:func:`worker_specs`). ``report(stored,
    total)`` is called whenever the count of stored pair results changes. Returns ``{"batches": n sent,
    "local": why the coordinator scores the rest itself, or None}``.
    """
    payloads = [batch_payload(suite, team, handles[team], specs[team], indices) for team in teams]
    sent = spread(FINAL_TEAM, payloads)
    if sent.local is not None:
        return _local(suite, f"{len(sent.handles)} of {len(payloads)} batches sent; {sent.local}", len(sent.handles))
    keys = {Pair(suite.key, team, handles[team].code_sha256, int(i)).key for team in teams for i in indices}
    batches = [batch_key(suite.key, team, handles[team].code_sha256, list(indices)) for team in teams]
    idle_s = config.final_worker_idle_s()
    last_stored, last_sign, waiting = -1, time.time(), set(keys)
    while True:
        waiting -= stored_blob_keys(PAIR_RESULTS, waiting)  # only this suite's keys, and only those still awaited
        stored = len(keys) - len(waiting)
        if stored != last_stored:
            report(stored, len(keys))
            last_stored, last_sign = stored, time.time()
        if stored == len(keys):
            return {"batches": len(payloads), "local": None}
        if any(_heartbeating(key) for key in batches):
            last_sign = time.time()
        try:
            unfinished = sent.unfinished()
        except Exception as exc:  # noqa: BLE001 - the result store (Redis) is away: the rest is scored here
            return _local(suite, f"the broker's result store cannot be read ({type(exc).__name__}: {exc})",
                          len(payloads))
        if unfinished == 0:
            return _local(suite, f"the workers ended their tasks with {len(keys) - stored} pairs unscored",
                          len(payloads))
        if time.time() - last_sign > idle_s:
            return _local(suite, f"no worker showed progress for {idle_s:.0f} s (WHESTBOARD_FINAL_WORKER_IDLE_S)",
                          len(payloads))
        time.sleep(POLL_S)


def _heartbeating(result_key: str) -> bool:
    """A process (a worker, or another coordinator) holds this batch: its heartbeat is fresh and, on this
    host, its process is alive (the ledger's liveness rule: a killed worker's batch is no sign of work)."""
    row = find_job(result_key, None)
    if row is None or row.status != "running" or (row.heartbeat_at or 0) <= time.time() - STALE_AFTER_S:
        return False
    host, _, pid = (row.worker or "").rpartition(":")
    return not pid.isdigit() or owner_alive(int(pid), host)


def _local(suite: FinalSuite, why: str, sent: int) -> dict:
    sentence = f"final {suite.key}: scoring the missing pairs in this process: {why}"
    logs.event("final.local", level=logging.WARNING, msg=sentence)
    return {"batches": sent, "local": sentence}
