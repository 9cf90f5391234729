"""The upload job: contract check, sandboxed run, baselines on the same MLPs, and its report.

The queue (:mod:`whestboard.jobs._queue`) runs :func:`run_upload_job` for each uploaded estimator; the
page queues what :func:`job_spec` returns, checked by the same parsers the job uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from whestboard import config
from whestboard.data import get_dataset
from whestboard.rules import environment_for, explained_error, get_round, verdict_of
from whestboard.sandbox import SandboxCancelled, SandboxedEstimator, check_contract, load_upload, prewarm
from whestboard.scoring import _inputs, _run_records, _runs
from whestboard.scoring._estimators import resolve_estimator
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._report import run_margins, whest_shaped
from whestboard.scoring._rulebook import rulebook_for
from whestboard.scoring._sandboxed import sandboxed_handle, shipped_upload
from whestboard.scoring._served import UPLOAD_SPEC, UPLOADS_OFF

# --- the upload job: contract check, sandboxed run, baselines -------------------------------------

BASELINES = ("mean", "cov")


#: The longest team name an upload carries (the page's box holds 100 characters).
MAX_TEAM_CHARS = 100


@dataclass(frozen=True)
class UploadRun:
    """One upload job as asked: the upload, the dataset, the MLPs, the budget, the team. Parsed once by
    :func:`parse_upload_run` where it is asked (the page, a re-score) and once where it runs (the job
    reads its stored payload back through the same parser); priced by :attr:`cost`."""

    upload: str
    dataset: str
    mlps: str
    team: str | None
    budget: int | None
    rescore_of: str | None = None
    opened: Any = field(default=None, compare=False, repr=False)  # the served Dataset
    rulebook: Any = field(default=None, compare=False, repr=False)
    indices: tuple[int, ...] = field(default=(), compare=False, repr=False)

    @property
    def cost(self) -> float:
        """The most work it may do before it starts: its MLPs times the FLOP budget each is granted."""
        return float(len(self.indices)) * float(self.rulebook.flop_budget)

    def payload(self) -> dict:
        return {"upload": self.upload, "dataset": self.dataset, "mlps": self.mlps, "team": self.team,
                "budget": self.budget, **({"rescore_of": self.rescore_of} if self.rescore_of else {})}


def _short_text(value: object, what: str, limit: int) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise _inputs.RunError(f"{what} {_inputs.quoted(value)} is not text of at most {limit} characters")
    return value.strip() or None


def parse_upload_run(spec: object) -> UploadRun:
    """An upload job from ``{"upload", "dataset", "mlps", "team", "budget", "rescore_of"}``; RunError or
    KeyError (an unknown dataset) name what is wrong. The upload's hash is checked for its form here; the
    caller checks that the store holds it (the page before queueing, the job when it loads it)."""
    if not isinstance(spec, dict):
        raise _inputs.RunError(f"the upload job {_inputs.quoted(spec)} is not one this server queues")
    upload = spec.get("upload")
    if not isinstance(upload, str) or not UPLOAD_SPEC.fullmatch(f"upload:{upload}"):
        raise _inputs.RunError(f"upload {_inputs.quoted(upload)} is not an upload's sha256: upload the file again")
    if not isinstance(spec.get("dataset"), str):
        raise _inputs.RunError(f"dataset {_inputs.quoted(spec.get('dataset'))} is not a dataset key: pick one above")
    dataset = get_dataset(spec["dataset"])
    round_budget = rulebook_for(dataset.info.round_tag).round_budget
    budget = _inputs.parse_budget(spec.get("budget"), round_budget)
    rulebook = rulebook_for(dataset.info.round_tag, budget)
    mlps = spec.get("mlps") or ""
    if not isinstance(mlps, str):
        raise _inputs.RunError(f"MLP selection {_inputs.quoted(mlps)} is not text: {_inputs.SELECTION_HELP}")
    indices = tuple(_inputs.select_mlps(dataset, mlps))
    return UploadRun(upload, dataset.info.key, mlps, _short_text(spec.get("team"), "team", MAX_TEAM_CHARS), budget,
                     _short_text(spec.get("rescore_of"), "run id", 200), dataset, rulebook, indices)


def job_spec(upload_sha: str, dataset_key: str, mlps: str, *, team: str | None = None,
             budget: str | None = None) -> dict:
    """What the page queues: everything a job needs to run again from scratch, checked by the parser the
    job itself uses, so a bad value is a RunError on the page before anything is queued."""
    return parse_upload_run({"upload": upload_sha, "dataset": dataset_key, "mlps": mlps or "", "team": team or None,
                             "budget": budget or None}).payload()


def rescore_spec(run_id: str) -> dict:
    """The upload job that scores run ``run_id``'s stored package again under the installed versions.

    Same package, dataset, MLPs, budget and team as the run; ``rescore_of`` makes the job score afresh
    (never served from the run store) and record a new run that names the old one, which is kept.
    RunError, in words an organizer can act on, when there is no such run or it was not scored from a
    package kept in the artifact store (a built-in, a lone ``.py`` file scored from the command line).
    """
    report, digest = _stored_package(run_id, ", so it cannot be re-scored here; upload the package on the Upload "
                                             "page to score it under the installed versions")
    rulebook = report.get("rulebook") or {}
    budget = rulebook.get("flop_budget") if rulebook.get("custom_budget") else None
    spec = job_spec(digest, (report.get("dataset") or {}).get("key"), ",".join(map(str, report["mlp_indices"])),
                    team=report.get("team"), budget=str(budget) if budget else None)
    return {**spec, "rescore_of": run_id}


def run_package(run_id: str, advice: str = "") -> str:
    """``upload:<sha256>``, the package run ``run_id`` scored, as the artifact store keeps it (a spec the
    sandbox takes); RunError saying why not (no such run, or one not scored from a kept package: the
    sentence then ends with ``advice``, what the caller's user can do instead)."""
    return f"upload:{_stored_package(run_id, advice)[1]}"


def _stored_package(run_id: str, advice: str) -> tuple[dict, str]:
    """(the run's report, the sha256 of its package in the artifact store), or RunError ending in ``advice``."""
    report = _run_records.get_run(run_id)
    if report is None:
        raise _inputs.RunError(f"no run {_inputs.quoted(run_id)}: give the id of a run made from an upload")
    estimator = report.get("estimator") or {}
    digest = estimator.get("code_sha256") or ""
    try:
        load_upload(digest)
    except KeyError:
        raise _inputs.RunError(
            f"run {run_id} scored {estimator.get('label') or 'an estimator'} ({estimator.get('kind') or 'unknown kind'}), "
            "whose package is not kept in the artifact store" + advice) from None
    return report, digest


def job_cost(spec: dict) -> float:
    """The most work a queued job may do before it starts (:attr:`UploadRun.cost` of its payload)."""
    return parse_upload_run(spec).cost


def verdict_row(entry: dict) -> dict:
    """One MLP's line of the upload verdict table: the grader's verdict word and sentence, and our meter flag."""
    verdict, message = verdict_of(entry)
    return {"mlp_index": entry["mlp_index"], "mlp_name": entry.get("mlp_name", ""), "verdict": verdict,
            "message": entry.get("failure_reason") or message, "flops_used": entry.get("flops_used", 0),
            "final_layer_mse": entry.get("final_layer_mse"), "wall_time_s": entry.get("wall_time_s"),
            "residual_wall_time_s": entry.get("residual_wall_time_s"), "traceback": entry.get("traceback"),
            "meter_tampering": entry.get("meter_tampering")}


def run_upload_job(ctx) -> dict:
    """The body of an upload job (:class:`whestboard.jobs._queue.JobContext`): check, score, compare."""

    if not config.uploads_allowed():  # a job queued where uploads are on, taken where they are off
        return {"ok": False, "error": f"not run: {UPLOADS_OFF}"}
    try:
        asked = parse_upload_run(ctx.job.spec)
        upload = load_upload(asked.upload)
    except (_inputs.RunError, KeyError) as exc:  # a job queued before its page checked it: say why, score nothing
        return {"ok": False, "error": str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)}
    result: dict = {"ok": False, "upload": {"sha256": upload.sha256, "filename": upload.filename, "kind": upload.kind},
                    "shipped": shipped_upload(upload)}
    dataset, rulebook, request_indices = asked.opened, asked.rulebook, list(asked.indices)
    result["grader_environment"] = environment_for(rulebook.round_tag).as_dict()

    ctx.report(phase="contract", done=0, total=len(request_indices), message="checking the contract in the sandbox")
    contract = check_contract(upload.submission, _round(rulebook.round_tag), should_cancel=ctx.should_cancel,
                              on_started=prewarm)  # the scoring worker warms up meanwhile
    result["contract"] = contract.as_dict()
    if not contract.ok:
        # named as `whest run --json` names it, said once (the page's panel) with the advice that applies
        result["error"] = contract.verdict() if contract.error else contract.summary()
        if contract.error:
            explained = explained_error(contract.error, rulebook.round_tag)
            result["whest_error"] = {**contract.error, "sentence": explained["sentence"], "hint": explained["hint"]}
        return result

    created: list[SandboxedEstimator] = []
    handle = _upload_handle(upload, ctx.should_cancel, created, rulebook.round_tag)
    verdicts: list[dict] = []

    def progress(done: int, total: int, entry: dict) -> None:
        verdicts.append(verdict_row(entry))
        ctx.report(phase="scoring", done=done, total=total, verdicts=verdicts,
                   message=f"scored MLP {entry['mlp_index']} ({done}/{total})")

    ctx.report(phase="scoring", done=0, total=len(request_indices), verdicts=[], message="scoring in the sandbox")
    request = _runs.RunRequest(dataset, request_indices, handle, rulebook, source="upload", team=asked.team,
                               rescore_of=asked.rescore_of)
    try:  # a re-score is measured again, never served from the store: it is a new record beside the old
        outcome = _runs.run_and_record(request, on_progress=progress, should_cancel=ctx.should_cancel,
                                       use_cache=not asked.rescore_of)
    except SandboxCancelled:
        return {**result, "cancelled": True, "error": "cancelled while scoring", "verdicts": verdicts}
    except _inputs.RunError as exc:
        return {**result, "error": str(exc), "verdicts": verdicts}
    finally:
        _attach_sandbox_facts(result, created)
    if outcome.cancelled:
        return {**result, "cancelled": True, "error": "cancelled between MLPs", "verdicts": verdicts}
    result.update(ok=True, run_id=outcome.run_id, cached=outcome.cached,
                  verdicts=[verdict_row(e) for e in outcome.report["results"]["per_mlp"]],
                  margins=run_margins(outcome.report).as_dict())
    result["baselines"] = _baseline_runs(dataset, request_indices, rulebook, ctx)
    return result


def _round(tag: str):

    return get_round(tag)


def _upload_handle(upload, should_cancel, created: list, round_tag: str) -> EstimatorHandle:
    """The stored upload's handle under ``round_tag``'s rules, remembering the sandbox it builds."""
    handle = sandboxed_handle(f"upload:{upload.sha256}", should_cancel=should_cancel, round_tag=round_tag)
    build = handle.factory

    def factory():
        estimator = build()
        created.append(estimator)
        return estimator

    return replace(handle, factory=factory)


def _attach_sandbox_facts(result: dict, created: list) -> None:
    if not created:
        return
    estimator = created[-1]
    result["output"] = estimator.output.text()
    result["output_truncated"] = estimator.output.truncated
    result["confinement"] = estimator.started.confinement if estimator.started else {}
    result["worker_restarts"] = estimator.restarts


def _baseline_runs(dataset, indices: list[int], rulebook, ctx) -> dict[str, str | None]:
    """Mean and covariance propagation on the same MLPs (served from the store when already run)."""

    found: dict[str, str | None] = {}
    for name in BASELINES:
        if ctx.should_cancel():
            break
        ctx.report(phase="baselines", done=0, total=len(indices), message=f"comparing with the {name} baseline")
        request = _runs.RunRequest(dataset, indices, resolve_estimator(name), rulebook, source="lab")
        try:
            found[name] = _runs.run_and_record(request, should_cancel=ctx.should_cancel).run_id
        except _inputs.RunError:
            found[name] = None
    return found


# --- what the page shows after a job ------------------------------------------------------------------


def upload_run(result: dict) -> dict | None:
    """The run an upload job recorded (its full report: what the page's result summary is drawn from)."""
    if not result or not result.get("run_id"):
        return None
    return _run_records.get_run(result["run_id"])


def upload_comparison(result: dict) -> dict | None:
    """Per-layer MSE of the upload's run and the baselines on the same MLPs, with the noise floor."""

    report = upload_run(result)
    if report is None:
        return None
    series = {"upload": report["results"]["per_layer_mse"]}
    for name, run_id in (result.get("baselines") or {}).items():
        baseline = _run_records.get_run(run_id) if run_id else None
        if baseline is not None:
            series[name] = baseline["results"]["per_layer_mse"]
    return {"series": series, "noise_floor": (report.get("noise") or {}).get("noise_floor"),
            "label": report["estimator"]["label"]}


def json_report(result: dict) -> dict | None:
    """The run in the ``score --json`` format, plus what the sandbox saw (contract, verdicts, output)."""

    report = _run_records.get_run(result["run_id"]) if result and result.get("run_id") else None
    if report is None:
        return None
    payload = whest_shaped(report, cached=bool(result.get("cached")))
    payload["whestboard"]["sandbox"] = {key: result.get(key) for key in (
        "upload", "contract", "verdicts", "output", "output_truncated", "confinement", "worker_restarts",
        "baselines")}
    payload["whestboard"]["shipped"] = result.get("shipped")
    payload["whestboard"]["grader_environment"] = result.get("grader_environment")
    return payload
