"""How an estimator *file* becomes a run: always through the sandbox, never in the app's process.

``whestboard.estimators.resolve_estimator`` hands every file spec here:

* ``PATH.py`` – a single-file submission (only that file ships, as in
  ``whest package`` file mode);
* ``PATH.tar.gz`` / ``PATH.tgz`` – an archive ``whest package`` wrote, checked
  by :mod:`whestboard.uploads` and unpacked into the upload store;
* ``upload:<sha256>`` – an upload already in the store (the app's jobs).

The handle's ``code_sha256`` is the sha256 of the uploaded bytes (the file, or
the archive), so a run is recorded with the hash of exactly what was uploaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from whestboard.estimators import EstimatorHandle
from whestboard.rounds import round_for_shape
from whestboard.sandbox import SandboxedEstimator, SandboxLimits, SubmissionFiles

FILE_SUFFIXES = (".py", ".tar.gz", ".tgz")


def is_file_spec(text: str) -> bool:
    return text.startswith("upload:") or text.lower().endswith(FILE_SUFFIXES)


class RoundAwareSandbox(SandboxedEstimator):
    """A sandboxed estimator that takes the wall and residual caps of the round it is set up for.

    ``runs`` gives ``setup`` a ``SetupContext`` (shape and budget, no caps); the
    round is recovered from the shape, as the datasets carry it. With explicit
    ``limits`` nothing is inferred.
    """

    def __init__(self, submission: SubmissionFiles, limits: SandboxLimits | None = None, **kwargs) -> None:
        self._explicit_limits = limits is not None
        super().__init__(submission, None, limits, **kwargs)

    def setup(self, context) -> None:
        rnd = round_for_shape(context.width, context.depth)
        if rnd is not None and not self._explicit_limits:
            self.limits = self.limits.for_round(rnd)
        super().setup(context)


def _handle(label: str, kind: str, digest: str, submission: SubmissionFiles, description: str,
            limits: SandboxLimits | None, should_cancel: Callable[[], bool] | None,
            class_label: str = "") -> EstimatorHandle:
    return EstimatorHandle(
        label=label,
        kind=kind,
        code_sha256=digest,
        factory=lambda: RoundAwareSandbox(submission, limits, should_cancel=should_cancel),
        description=description,
        class_name=submission.class_name or class_label,
        submission_dir=str(submission.root),
    )


def sandboxed_handle(
    spec: str,
    *,
    limits: SandboxLimits | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> EstimatorHandle:
    """The run handle for a file or stored upload; the estimator runs in a sandbox worker."""
    from whestboard import uploads

    text = spec.strip()
    if text.startswith("upload:"):
        upload = uploads.load(text.split(":", 1)[1])
        return _handle(upload.filename, "upload", upload.sha256, upload.submission,
                       f"uploaded {upload.filename} ({upload.short_hash}), sandboxed", limits, should_cancel,
                       _entry_class(upload))
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"estimator file {path} does not exist")
    if path.suffix == ".py":
        uploads.check_size(path.stat().st_size)
        data = path.read_bytes()
        uploads.check_python_source(data, path.name)
        submission = SubmissionFiles.single_file(path)
        submission = replace(submission, class_name=None)
        return _handle(path.name, "file", hashlib.sha256(data).hexdigest(), submission,
                       f"{path} (sandboxed worker)", limits, should_cancel, uploads.guess_class_name(data))
    upload = uploads.ingest_path(path)
    return _handle(path.name, "file", upload.sha256, upload.submission,
                   f"{path} (whest package archive, sandboxed worker)", limits, should_cancel, _entry_class(upload))


def _entry_class(upload) -> str:
    from whestboard import uploads

    if upload.class_name:
        return upload.class_name
    return uploads.guess_class_name((upload.submission.root / upload.entry).read_bytes())


# --- the upload job: contract check, sandboxed run, baselines -------------------------------------

BASELINES = ("mean", "cov")


def job_spec(upload_sha: str, dataset_key: str, mlps: str, *, team: str | None = None,
             budget: str | None = None) -> dict:
    """What the page queues: everything a job needs to run again from scratch.

    The MLP selection and budget are checked here by the parsers the job itself
    uses, so a bad one is a RunError on the page before anything is queued.
    """
    spec = {"upload": upload_sha, "dataset": dataset_key, "mlps": mlps or "", "team": team or None,
            "budget": budget or None}
    _job_inputs(spec)
    return spec


def _job_inputs(spec: dict):
    """(dataset, rulebook, MLP indices) a job spec names; RunError/KeyError say what is wrong."""
    from whestboard import registry, runs

    if not isinstance(spec.get("dataset"), str):
        raise runs.RunError(f"dataset {runs.quoted(spec.get('dataset'))} is not a dataset key: pick one above")
    dataset = registry.get_dataset(spec["dataset"])
    round_budget = runs.rulebook_for(dataset.info.round_tag).round_budget
    rulebook = runs.rulebook_for(dataset.info.round_tag, runs.parse_budget(spec.get("budget"), round_budget))
    return dataset, rulebook, runs.select_mlps(dataset, spec.get("mlps"))


def _verdict_row(entry: dict) -> dict:
    from whestboard.sandbox import verdict_of

    verdict, message = verdict_of(entry)
    return {"mlp_index": entry["mlp_index"], "mlp_name": entry.get("mlp_name", ""), "verdict": verdict,
            "message": entry.get("failure_reason") or message, "flops_used": entry.get("flops_used", 0),
            "final_layer_mse": entry.get("final_layer_mse"), "wall_time_s": entry.get("wall_time_s"),
            "residual_wall_time_s": entry.get("residual_wall_time_s"), "traceback": entry.get("traceback")}


def run_upload_job(ctx) -> dict:
    """The body of an upload job (:class:`whestboard.jobqueue.JobContext`): check, score, compare."""
    from whestboard import runs, sandbox, uploads
    from whestboard.contract import check_contract

    spec = ctx.job.spec
    upload = uploads.load(spec["upload"])
    result: dict = {"ok": False, "upload": {"sha256": upload.sha256, "filename": upload.filename, "kind": upload.kind}}
    try:
        dataset, rulebook, request_indices = _job_inputs(spec)
    except runs.RunError as exc:  # a job queued before its page checked it: say why, score nothing
        return {**result, "error": str(exc)}

    ctx.report(phase="contract", done=0, total=len(request_indices), message="checking the contract in the sandbox")
    contract = check_contract(upload.submission, dataset.info.round or _round(rulebook.round_tag),
                              should_cancel=ctx.should_cancel,
                              on_started=sandbox.prewarm)  # the scoring worker warms up meanwhile
    result["contract"] = contract.as_dict()
    if not contract.ok:
        result["error"] = contract.summary()
        return result

    created: list[SandboxedEstimator] = []
    handle = _upload_handle(upload, ctx.should_cancel, created)
    verdicts: list[dict] = []

    def progress(done: int, total: int, entry: dict) -> None:
        verdicts.append(_verdict_row(entry))
        ctx.report(phase="scoring", done=done, total=total, verdicts=verdicts,
                   message=f"scored MLP {entry['mlp_index']} ({done}/{total})")

    ctx.report(phase="scoring", done=0, total=len(request_indices), verdicts=[], message="scoring in the sandbox")
    request = runs.RunRequest(dataset, request_indices, handle, rulebook, source="upload", team=spec.get("team"))
    try:
        outcome = runs.run(request, on_progress=progress, should_cancel=ctx.should_cancel)
    except sandbox.SandboxCancelled:
        return {**result, "cancelled": True, "error": "cancelled while scoring", "verdicts": verdicts}
    except runs.RunError as exc:
        return {**result, "error": str(exc), "verdicts": verdicts}
    finally:
        _attach_sandbox_facts(result, created)
    if outcome.cancelled:
        return {**result, "cancelled": True, "error": "cancelled between MLPs", "verdicts": verdicts}
    result.update(ok=True, run_id=outcome.run_id, cached=outcome.cached,
                  verdicts=[_verdict_row(e) for e in outcome.report["results"]["per_mlp"]])
    result["baselines"] = _baseline_runs(dataset, request_indices, rulebook, ctx)
    return result


def _round(tag: str):
    from whestboard.rounds import get_round

    return get_round(tag)


def _upload_handle(upload, should_cancel, created: list) -> EstimatorHandle:
    """The stored upload's handle, remembering the sandbox it builds (for output and confinement)."""
    handle = sandboxed_handle(f"upload:{upload.sha256}", should_cancel=should_cancel)
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
    from whestboard import runs
    from whestboard.estimators import resolve_estimator

    found: dict[str, str | None] = {}
    for name in BASELINES:
        if ctx.should_cancel():
            break
        ctx.report(phase="baselines", done=0, total=len(indices), message=f"comparing with the {name} baseline")
        request = runs.RunRequest(dataset, indices, resolve_estimator(name), rulebook, source="lab")
        try:
            found[name] = runs.run(request, should_cancel=ctx.should_cancel).run_id
        except runs.RunError:
            found[name] = None
    return found


# --- what the page shows after a job ------------------------------------------------------------------


def comparison(result: dict) -> dict | None:
    """Per-layer MSE of the upload's run and the baselines on the same MLPs, with the noise floor."""
    from whestboard import runstore

    if not result or not result.get("run_id"):
        return None
    report = runstore.get_run(result["run_id"])
    if report is None:
        return None
    series = {"upload": report["results"]["per_layer_mse"]}
    for name, run_id in (result.get("baselines") or {}).items():
        baseline = runstore.get_run(run_id) if run_id else None
        if baseline is not None:
            series[name] = baseline["results"]["per_layer_mse"]
    return {"series": series, "noise_floor": (report.get("noise") or {}).get("noise_floor"),
            "label": report["estimator"]["label"]}


def json_report(result: dict) -> dict | None:
    """The run in the ``score --json`` format, plus what the sandbox saw (contract, verdicts, output)."""
    from types import SimpleNamespace

    from whestboard import runstore
    from whestboard.cli_score import whest_shaped

    report = runstore.get_run(result["run_id"]) if result and result.get("run_id") else None
    if report is None:
        return None
    payload = whest_shaped(SimpleNamespace(report=report, cached=bool(result.get("cached"))))
    payload["whestboard"]["sandbox"] = {key: result.get(key) for key in (
        "upload", "contract", "verdicts", "output", "output_truncated", "confinement", "worker_restarts",
        "baselines")}
    return payload
