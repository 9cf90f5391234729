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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

_EXPORTS = {
    "check_contract": "_contract",
    "OutputCapture": "_host",
    "SandboxCancelled": "_host",
    "SandboxedEstimator": "_host",
    "SandboxLimits": "_host",
    "SubmissionFiles": "_host",
    "prewarm": "_host",
    "spare_worker": "_host",
    "whest_error_of": "_host",
    "MAX_SUBMISSION_FILES": "_ingest",
    "SourceSyntaxError": "_ingest",
    "UploadError": "_ingest",
    "check_python_source": "_ingest",
    "check_size": "_ingest",
    "folder_files": "_ingest",
    "guess_class_name": "_ingest",
    "ingest_folder": "_ingest",
    "ingest_path": "_ingest",
    "ingest_several": "_ingest",
    "ingest_upload": "_ingest",
    "is_archive": "_ingest",
    "kind_of": "_ingest",
    "left_behind": "_ingest",
    "load_upload": "_ingest",
    "missing_files_note": "_ingest",
    "shipped_alone_note": "_ingest",
}

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


def __getattr__(name: str):
    """Each public name imported from its module on first use, not with the package.

    A worker and the fork server import ``whestboard.sandbox._worker``, which runs this package's
    ``__init__`` first: importing the host's side there (``_host``, ``_contract``, ``_ingest``, and
    through them the job ledger and SQLAlchemy) cost each fork server and spawned worker half a second
    and put app code in every worker's ``sys.modules``.
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
