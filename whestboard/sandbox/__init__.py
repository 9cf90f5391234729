"""Running a participant's code safely: ingest, contract check, the confined worker and its protocol.

Owns: accepting uploads (``.py``, folders, ``whest package`` archives; sizes, members, manifests),
the contract check, the grader's import rule inside the worker (no numpy in Phase 2), the meter watch
(``meter_tampering``: what made flopscope count less), the host side
of a sandboxed estimator (a ``BaseEstimator`` that ``evaluate_estimator`` drives like whestbench's
SubprocessRunner), the worker that confines itself
(private /tmp, privileges, rlimits, Landlock, seccomp), the fork server workers are forked from (warm:
the libraries imported once), the pipe protocol, and verdicts. Nothing a
participant wrote is ever imported into the app's process. May import: ``whestboard.rules``,
``whestboard.jobs`` (liveness), ``whestboard.config``, ``whestboard.logs``.
"""

from whestboard.sandbox._contract import check_contract
from whestboard.sandbox._host import (
    OutputCapture,
    SandboxCancelled,
    SandboxedEstimator,
    SandboxLimits,
    SubmissionFiles,
    prewarm,
    spare_worker,
    whest_error_of,
)
from whestboard.sandbox._ingest import (
    MAX_SUBMISSION_FILES,
    SourceSyntaxError,
    UploadError,
    check_python_source,
    check_size,
    folder_files,
    guess_class_name,
    ingest_folder,
    ingest_path,
    ingest_several,
    ingest_upload,
    is_archive,
    kind_of,
    left_behind,
    load_upload,
    missing_files_note,
    shipped_alone_note,
)

__all__ = [
    "check_contract",
    "check_python_source",
    "check_size",
    "folder_files",
    "guess_class_name",
    "ingest_folder",
    "ingest_path",
    "ingest_several",
    "ingest_upload",
    "is_archive",
    "kind_of",
    "left_behind",
    "load_upload",
    "MAX_SUBMISSION_FILES",
    "missing_files_note",
    "OutputCapture",
    "prewarm",
    "SandboxCancelled",
    "SandboxedEstimator",
    "SandboxLimits",
    "shipped_alone_note",
    "SourceSyntaxError",
    "spare_worker",
    "SubmissionFiles",
    "UploadError",
    "whest_error_of",
]
