"""Re-scoring a stored package under the installed whestbench and flopscope: a new record, the old kept.

flopscope releases move FLOP prices, so a score is only comparable with scores priced by the same
versions. An organizer re-scores a run (or a submission made from one) whose package the artifact
store keeps: an ordinary upload job of the one job system (``scoring.run_upload_job``) scores the same
package on the same MLPs under the same budget, afresh, and records a new run naming the old one. For a
submission, the finished job's run becomes a new submission (``settle_rescore``) beside the old one,
each with the versions that priced it. A submission imported from a file has no package here: the
action says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from whestboard.jobs import QueueFull, check_cost, ensure_executor, queue_job, queued_job
from whestboard.leaderboard import _files, _store
from whestboard.scoring import RunError, get_run, job_cost, rescore_spec, run_upload_job

#: Who the queue counts an organizer's re-scores against (its per-client bound applies).
ORGANIZER_CLIENT = "organizer"
#: What refuses a re-score, each with a sentence saying why (no package, no such run, a full queue, a budget).
RESCORE_ERRORS = (ValueError, KeyError, RunError, QueueFull)
#: A re-scored submission's id: the old id and the new run's.
RESCORE_MARK = "~rescored-"


@dataclass(frozen=True)
class QueuedRescore:
    job_id: str
    run_id: str  # the run whose package is scored again
    submission_id: str | None  # the submission re-scored, when the organizer named one


def rescore_target(identifier: str, *, url: str | None = None) -> tuple[str, str | None]:
    """(run id, submission id or None) that ``identifier`` names; ValueError saying why it cannot be re-scored."""
    identifier = (identifier or "").strip()
    if not identifier:
        raise ValueError("give the id of a submission or of a run to re-score")
    sub = _store.get_submission(identifier, url=url)
    if sub is None:
        return identifier, None
    if not sub.run_id:
        origin = f"from {sub.source}" if sub.source else "from a file"
        raise ValueError(f"submission {identifier} was imported {origin}: no package of it is stored here, so it "
                         "cannot be re-scored; upload its package on the Upload page and score it there")
    return sub.run_id, identifier


def queue_rescore(identifier: str, *, url: str | None = None) -> QueuedRescore:
    """Queue the job that re-scores what ``identifier`` names (ValueError, RunError, QueueFull say why not)."""
    run_id, submission_id = rescore_target(identifier, url=url)
    spec = rescore_spec(run_id)
    if submission_id is not None:
        spec["rescore_submission"] = submission_id
    check_cost("This re-score", job_cost(spec))
    job_id = queue_job(ORGANIZER_CLIENT, spec)
    ensure_executor(run_upload_job)
    return QueuedRescore(job_id, run_id, submission_id)


def settle_rescore(job_id: str, *, url: str | None = None) -> str | None:
    """The new submission of a finished re-score of a submission (written once; None until there is one).

    Idempotent: its id comes from the old submission and the new run, so a second call finds it unchanged.
    """
    job = queued_job(job_id)
    if job is None or not job.finished or not (job.result or {}).get("ok"):
        return None
    old_id = job.spec.get("rescore_submission")
    new_run = (job.result or {}).get("run_id")
    if not old_id or not new_run:
        return None
    old = _store.get_submission(old_id, url=url)
    report = get_run(new_run)
    if old is None or report is None:
        return None
    sub, mlps = rescored_submission(old, report)
    _store.upsert([sub], mlps, url=url)
    _files._refresh_snapshots(url)  # the import's own: a failed cache write is logged, the rows stay
    return sub.submission_id


def rescored_submission(old: _store.Submission, report: dict) -> tuple[_store.Submission, list[_store.MLPResult]]:
    """The run ``report`` (a re-score of ``old``'s package) as a new submission of ``old``'s team and round."""
    sid = f"{old.submission_id}{RESCORE_MARK}{report['run_id'][:12]}"
    sub, mlps, problems = _files.parse_run_report(report, f"re-score of {old.submission_id}", team=old.team,
                                                  submission_id=sid, round_tag=old.round)
    if problems:
        raise RunError("; ".join(problems))
    variances = {int(e["mlp_index"]): e.get("avg_variance") for e in report["results"]["per_mlp"]}
    mlps = [replace(m, avg_variance=variances.get(m.mlp_index)) for m in mlps]
    sub = replace(sub, dataset=(report.get("dataset") or {}).get("key") or old.dataset,
                  mean_avg_variance=(report.get("mc_reference") or {}).get("mean_avg_variance"),
                  estimator=old.estimator, source="rescore", run_id=report["run_id"], rescore_of=old.submission_id)
    return sub, mlps


@dataclass(frozen=True)
class RescoreProgress:
    finished: bool
    ok: bool
    text: str


def rescore_progress(job_id: str, *, url: str | None = None) -> RescoreProgress:
    """Where a queued re-score stands, in a sentence; once finished, its new submission is written."""
    job = queued_job(job_id)
    if job is None:
        return RescoreProgress(True, False, f"Job {job_id} is not known to this server.")
    if not job.finished:
        where = f"{job.position} in the queue" if job.position else (job.progress or {}).get("message", job.status)
        return RescoreProgress(False, False, f"Re-scoring under the installed versions: {where}.")
    result = job.result or {}
    if not result.get("ok"):
        return RescoreProgress(True, False, f"The re-score {job.status}: {job.error or result.get('error')}.")
    new_run = result["run_id"]
    versions = (get_run(new_run) or {}).get("versions") or {}
    priced = f"whestbench {versions.get('whestbench_version')} · flopscope {versions.get('flopscope_version')}"
    text = f"Re-scored run {job.spec.get('rescore_of')} as run {new_run} ({priced}); the old run is kept."
    new_sub = settle_rescore(job_id, url=url)
    if new_sub:
        text += f" Its submission {job.spec.get('rescore_submission')} is kept beside the new one, {new_sub}."
    return RescoreProgress(True, True, text)
