"""One failure vocabulary, read off the grader's own flags: what went wrong with an MLP, in one word and one sentence.

``whestbench.scoring.evaluate_estimator`` marks a failed MLP with a flag (``budget_exhausted``,
``time_exhausted``, ``residual_wall_time_exhausted``, ``combined_budget_exhausted``) or an
``error_code``; the MLP is then scored as the all-zero prediction with multiplier 1.0. Runs, the
sandbox, the pages and the reports all describe a failure through :func:`judge`, so the lab, the
upload page and ``score --json`` name the same failure the same way.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any, Protocol

from whestboard.rules._environment import environment_for

FAILURE_FLAGS = ("budget_exhausted", "time_exhausted", "residual_wall_time_exhausted", "combined_budget_exhausted")
FALLBACK = "scored as the all-zero prediction with multiplier 1.0 (the grader's fallback)"
#: The verdicts an MLP can get, in the order the pages list them.
VERDICTS = ("ok", "budget", "combined", "time", "residual", "exception", "shape", "non-finite", "memory",
            "fork", "disk", "crash")
#: The sandbox's error codes (and Python's MemoryError) by the verdict they mean.
CODE_VERDICTS = {
    "SANDBOX_MEMORY": "memory", "SANDBOX_FORK": "fork", "SANDBOX_FILE_SIZE": "disk",
    "SANDBOX_DISK_QUOTA": "disk", "SANDBOX_WRITE_REFUSED": "disk", "SANDBOX_CPU": "time", "PREDICT_TIMEOUT": "time",
    "SANDBOX_CRASH": "crash", "SANDBOX_PROTOCOL": "crash", "WORKER_EOF": "crash",
    "SETUP_TIMEOUT": "time", "MemoryError": "memory",
}


class Limits(Protocol):
    """What a sentence can quote about the limits (a Rulebook has all of it)."""

    flop_budget: int
    wall_time_limit_s: float | None
    residual_wall_time_limit_s: float | None


def is_failed(entry: dict) -> bool:
    """The grader's own test (``evaluate_estimator``'s ``_is_failed_entry``)."""
    return bool(entry.get("error_code")) or any(bool(entry.get(k)) for k in FAILURE_FLAGS)


def _limit(limits: Limits | None, name: str, text: str) -> str:
    value: Any = getattr(limits, name, None) if limits is not None else None
    return text.format(value) if value is not None else ""


def _error_parts(entry: dict) -> tuple[str, dict]:
    error = entry.get("error")
    message = error.get("message", "") if isinstance(error, dict) else str(error or "")
    details = (error.get("details") or {}) if isinstance(error, dict) else {}
    return message, details if isinstance(details, dict) else {}


def waiting_mattered(entry: dict, limits: Limits | None) -> bool:
    """Whether an MLP failed on a time rule that it would have met without the time it spent waiting.

    The wait is ``predict_wait_s`` (predict's wall time not spent on the worker's CPU, as the sandbox worker
    counts it) when known, else ``cpu_wait_s`` (the whole scoring call's, ``whestboard.jobs._contention``): a
    core busy with other work, or the estimator sleeping. "Met without it" means the wait *may* have caused
    the failure, and a quiet machine may pass the MLP.
    """
    wait = float(entry["predict_wait_s"] if entry.get("predict_wait_s") is not None else entry.get("cpu_wait_s") or 0.0)
    if wait <= 0.0 or limits is None:
        return False
    if entry.get("time_exhausted"):
        used, cap = entry.get("wall_time_s"), limits.wall_time_limit_s
    elif entry.get("residual_wall_time_exhausted"):
        used, cap = entry.get("residual_wall_time_s"), limits.residual_wall_time_limit_s
    elif entry.get("combined_budget_exhausted"):
        lam = float(getattr(limits, "lambda_flops_per_second", 0.0) or 0.0)
        used, cap = entry.get("effective_compute"), limits.flop_budget
        wait *= lam
    else:
        return False
    return used is not None and cap is not None and float(used) - wait <= float(cap)


def _wait_note(entry: dict) -> str:
    wait = entry["predict_wait_s"] if entry.get("predict_wait_s") is not None else entry["cpu_wait_s"]
    within = "predict's" if entry.get("predict_wait_s") is not None else "scoring this MLP's"
    return (f"; waiting may have caused it: {float(wait):.2f} s of {within} wall time were not spent computing "
            "(waiting for a CPU core on a busy machine, or the estimator sleeping or blocking), and without them "
            "it would be within the limit: score again on a quieter machine")


def judge(entry: dict, limits: Limits | None = None) -> tuple[str, str | None]:
    """``(verdict, sentence)`` for one ``per_mlp`` entry: ``("ok", None)`` for a valid MLP.

    The sentence says what happened in terms a participant can act on, quoting the limits when given;
    for a time rule it adds when waiting for a core may have made the difference (:func:`waiting_mattered`).
    """
    verdict, sentence = _judge(entry, limits)
    if sentence and verdict in ("time", "residual", "combined") and waiting_mattered(entry, limits):
        sentence += _wait_note(entry)
    return verdict, sentence


def _judge(entry: dict, limits: Limits | None = None) -> tuple[str, str | None]:
    if entry.get("budget_exhausted"):
        return "budget", (f"over the FLOP budget: flopscope stopped predict at {entry.get('flops_used', 0):,} FLOPs"
                          + _limit(limits, "flop_budget", " (budget {:,})"))
    if entry.get("time_exhausted"):
        return "time", (f"over the wall-clock cap: predict ran {entry.get('wall_time_s') or 0:.2f} s"
                        + _limit(limits, "wall_time_limit_s", " (cap {:g} s)"))
    if entry.get("residual_wall_time_exhausted"):
        return "residual", (f"over the residual wall-time cap: {entry.get('residual_wall_time_s') or 0:.3f} s outside "
                            "flopscope (Python loops, prints, numpy count here)"
                            + _limit(limits, "residual_wall_time_limit_s", " (cap {:g} s)"))
    if entry.get("combined_budget_exhausted"):
        return "combined", (f"over the combined budget: C = F + lambda*R = {entry.get('effective_compute') or 0:,.0f}"
                            + _limit(limits, "flop_budget", " > B = {:,}"))
    code = entry.get("error_code")
    if not code:
        return "ok", None
    message, details = _error_parts(entry)
    hint = details.get("hint")
    if code in CODE_VERDICTS:  # the sandbox's own messages already say what happened and what to do
        return CODE_VERDICTS[code], message
    if "expected_shape" in details:  # raised by the grader's own check of the returned array
        shape_wrong = details.get("got_shape") != details.get("expected_shape")
        verdict = "shape" if shape_wrong else ("non-finite" if "finite" in message else "exception")
        text = f"the grader rejected the predictions: {message}"
        return verdict, f"{text} ({hint})" if hint and hint not in text else text
    verdict = "non-finite" if "finite" in message else "exception"
    text = f"predict raised {code}: {message}"
    return verdict, f"{text} ({hint})" if hint and hint not in text else text


#: A failed MLP whose cause was not recorded (an old file, an import without a ``failure`` column).
UNRECORDED = "unrecorded"
#: How a figure or a sentence names each verdict of a failed MLP ("1 of 8 MLPs failed: residual time").
VERDICT_NAMES = {
    "budget": "FLOP budget", "combined": "combined budget", "time": "wall-clock cap", "residual": "residual time",
    "exception": "exception", "shape": "wrong shape", "non-finite": "non-finite values", "memory": "out of memory",
    "fork": "process refused", "disk": "disk write refused", "crash": "crash", UNRECORDED: "cause not recorded",
}
#: The verdicts a time rule gives: the only ones waiting for a core can cause.
TIMED_VERDICTS = ("time", "residual", "combined")


def failure_kind(entry: dict, limits: Limits | None = None) -> str | None:
    """The verdict word of one MLP's result, None when it did not fail.

    Read from the grader's flags when the entry carries them (a run, a baseline), else from a recorded
    ``failure`` word (a submission's per-MLP row), else :data:`UNRECORDED`.
    """
    if not (entry.get("failed") or is_failed(entry)):
        return None
    judged = judge(entry, limits)[0]
    if judged != "ok":
        return judged
    recorded = entry.get("failure")
    return recorded if isinstance(recorded, str) and recorded in VERDICTS else UNRECORDED


def failures_sentence(kinds: list[str | None], n_mlps: int | None = None) -> str | None:
    """``"1 of 8 MLPs failed: residual time"`` from the verdict words of a run's MLPs (None: none failed).

    ``kinds`` holds one word (or None for a valid MLP) per MLP; ``n_mlps`` is the run's MLP count when
    ``kinds`` lists only the failed ones.
    """
    failed = [k for k in kinds if k]
    if not failed:
        return None
    total = n_mlps if n_mlps is not None else len(kinds)
    counts: dict[str, int] = {}
    for kind in failed:
        counts[kind] = counts.get(kind, 0) + 1
    order = {kind: i for i, kind in enumerate((*VERDICTS, UNRECORDED))}
    causes = sorted(counts.items(), key=lambda item: order.get(item[0], len(order)))
    named = ", ".join(VERDICT_NAMES.get(kind, kind) + (f" ({n})" if len(causes) > 1 else "") for kind, n in causes)
    return f"{len(failed)} of {total} MLP{'s' if total != 1 else ''} failed: {named}"


def load_caused(entry: dict, limits: Limits | None) -> bool:
    """Whether the rules attribute this MLP's failure to waiting (:func:`waiting_mattered`): a load accident,
    never a result to keep. Needs the entry's flags and waits; an entry without them is not judged so."""
    return is_failed(entry) and waiting_mattered(entry, limits)


def verdict_of(entry: dict, limits: Limits | None = None) -> tuple[str, str]:
    """``judge`` with an empty sentence for a valid MLP: what a verdict table shows."""
    verdict, sentence = judge(entry, limits)
    return verdict, sentence or ""


# --- failures before any MLP is scored: whest run's own error codes -------------------------------

#: What to change for each error ``whest run --json`` names before scoring (the upload page's hint).
ERROR_HINTS = {
    "ESTIMATOR_MISSING_MODULE": "Import only the standard library, flopscope (flopscope.numpy as fnp) and whestbench; "
                                "ship your own helper modules with the submission: upload the folder (or several "
                                "files, or a `whest package` tarball), not estimator.py alone.",
    "ESTIMATOR_UNSUPPORTED_DTYPE": "Build arrays inside flopscope from numeric values with an explicit dtype.",
    "SCORING_VALIDATION_ERROR": "Define one BaseEstimator subclass (ideally named Estimator) in estimator.py, or "
                                "name the class to load.",
    "SCORING_RUNTIME_ERROR": "Importing estimator.py raised: fix the error the message names (a syntax error names "
                             "its file and line).",
    "SETUP_ERROR": "setup() raised: fix the error the message names; a file setup() reads must ship with the "
                   "submission (upload the folder or a `whest package` tarball).",
    "SETUP_TIMEOUT": "setup() must return within the setup timeout: load precomputed data, don't compute it.",
    "PACKAGING_VALIDATION_ERROR": "Fix the submission as the message says, then package it again with `whest package`.",
    "USAGE_ERROR": "Fix the command line as the message says (`--help` lists every option).",
    "INPUT_ERROR": "Fix the input the message names (a path, a dataset key, an id, a value), then run again.",
    "INTERNAL_ERROR": "Whestboard itself failed; the message says where. Run again, and report it if it repeats.",
}

#: Codes of failures that are not the estimator's: the command line, its inputs, or Whestboard itself.
USAGE_ERROR, INPUT_ERROR, INTERNAL_ERROR = "USAGE_ERROR", "INPUT_ERROR", "INTERNAL_ERROR"


def cli_error(code: str, message: str, stage: str = "cli") -> dict:
    """One failure of a command as ``--json`` prints it: ``{"ok": false, "error": {...}}``, with a hint."""
    return {"ok": False, "error": {"stage": stage, "code": code, "message": message, "hint": error_hint(code)}}


def whest_error(exc: BaseException, stage: str) -> dict:
    """``{"stage", "code", "message"[, "details"]}`` exactly as ``whest run --json`` reports ``exc``.

    ``stage`` is where it was raised: ``"run"`` while importing the estimator and resolving its class
    (whest's local runner lets those propagate), ``"setup"`` inside ``setup()``, which whest's runner
    wraps as ``SETUP_ERROR`` with the exception's text. The code and message come from whestbench's own
    CLI, so both tools name a failure alike.
    """
    from whestbench.cli import _error_payload
    from whestbench.runner import RunnerError, RunnerErrorDetail

    if stage == "setup" and not isinstance(exc, RunnerError):
        details = getattr(exc, "details", None)
        exc = RunnerError("setup", RunnerErrorDetail(code="SETUP_ERROR", message=str(exc),
                                                     details=details if isinstance(details, dict) else None))
    return _error_payload(exc if isinstance(exc, Exception) else RuntimeError(str(exc)),
                          include_traceback=False, stage=stage)["error"]


def error_hint(code: str | None) -> str:
    """What to change for a failure ``whest run`` names by ``code``; a generic sentence for others."""
    return ERROR_HINTS.get(code or "", "Fix the error the message names, then upload again.")


_MODULE_IN_MESSAGE = re.compile(r"import `([A-Za-z_][\w.]*)`|No module named '([A-Za-z_][\w.]*)'")


def explained_error(error: dict | None, round_tag: str | None = None) -> dict:
    """One failure ``whest run`` names (``code``, ``message``), said once with the advice that applies:
    ``{"code", "sentence", "hint"}``. whest's own message for a missing module is 600 characters that cover
    every case (a helper module that did not ship, a third-party package); here the round's import rule
    decides which case it is: a package the grader does not give participant code (numpy under Phase 2:
    use flopscope.numpy) or a module that is neither installed nor shipped (a helper: ship it). Any other
    failure keeps its message and ``error_hint``."""
    error = error or {}
    code, message = str(error.get("code") or ""), str(error.get("message") or "")
    out = {"code": code, "sentence": message, "hint": error_hint(code)}
    found = _MODULE_IN_MESSAGE.search(message) if code == "ESTIMATOR_MISSING_MODULE" else None
    if found is None:
        return out
    module = found.group(1) or found.group(2)
    top = module.split(".")[0]
    environment = environment_for(round_tag) if round_tag else None
    if environment is not None and not environment.may_import(top) and importlib.util.find_spec(top) is not None:
        names = ["the standard library", *environment.allowed_packages]
        allowed = ", ".join(names[:-1]) + " and " + names[-1]
        out["sentence"] = (f"`{module}` cannot be imported: under {round_tag} rules participant code may import only "
                           f"{allowed}, as on the grader, which has no {top}.")
        out["hint"] = ("Use flopscope.numpy instead: `import flopscope.numpy as fnp` has numpy's functions, metered "
                       "as the grader meters them." if top == "numpy" else
                       f"Compute what {top} gives with flopscope.numpy (`import flopscope.numpy as fnp`), or compute "
                       "it offline and ship the result with the submission (an .npz read in setup()).")
        return out
    if importlib.util.find_spec(top) is None:
        out["sentence"] = (f"`{module}` cannot be imported: no installed package and no file that shipped with the "
                           "submission has that name.")
        out["hint"] = ("If it is one of your own modules, ship it with estimator.py: upload the folder (or several "
                       "files, or a `whest package` tarball), not estimator.py alone.")
    return out
