"""Running a participant's code safely: ingest, contract check, the confined worker and its protocol.

Owns: accepting uploads (``.py``, folders, ``whest package`` archives; sizes, members, manifests),
the contract check, the grader's import rule inside the worker (no numpy in Phase 2), the meter watch
(``meter_tampering``: what made flopscope count less), the host side
of a sandboxed estimator (a ``BaseEstimator`` that ``evaluate_estimator`` drives like whestbench's
SubprocessRunner), the worker that confines itself
(private /tmp, privileges, rlimits, Landlock, seccomp), the pipe protocol, and verdicts. Nothing a
participant wrote is ever imported into the app's process. May import: ``whestboard.rules``,
``whestboard.jobs`` (liveness), ``whestboard.config``, ``whestboard.logs``.
"""

from whestboard.sandbox import confine, contract, host, imports, ingest, protocol
from whestboard.sandbox.contract import check_contract
from whestboard.sandbox.host import (
    OutputCapture,
    SandboxCancelled,
    SandboxedEstimator,
    SandboxLimits,
    SubmissionFiles,
)
from whestboard.sandbox.ingest import UploadError

__all__ = ["OutputCapture", "SandboxCancelled", "SandboxLimits", "SandboxedEstimator", "SubmissionFiles",
           "UploadError", "check_contract", "confine", "contract", "host", "imports", "ingest", "protocol"]
