"""How an estimator *file* becomes a run handle: always through the sandbox, never in the app's process.

``whestboard.scoring._estimators.resolve_estimator`` hands every file spec here:

* ``PATH.py`` – a single-file submission (only that file ships, as in ``whest package`` file mode; what
  it leaves in its folder is named by :func:`shipped`);
* ``DIR`` – a folder submission, shipped as ``whest package --estimator DIR`` ships it;
* ``PATH.tar.gz`` / ``PATH.tgz`` – an archive ``whest package`` wrote, checked by
  :mod:`whestboard.sandbox._ingest` and unpacked into the upload store;
* ``upload:<sha256>`` – an upload already in the store (the app's jobs).

The handle's ``code_sha256`` is the sha256 of the uploaded bytes (the file, or the archive), so a run is
recorded with the hash of exactly what was uploaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from whestboard.rules import get_round, round_for_shape
from whestboard.sandbox import (
    SandboxedEstimator,
    SandboxLimits,
    SubmissionFiles,
    check_python_source,
    check_size,
    folder_files,
    guess_class_name,
    ingest_folder,
    ingest_path,
    left_behind,
    load_upload,
    shipped_alone_note,
)
from whestboard.scoring._handle import EstimatorHandle

FILE_SUFFIXES = (".py", ".tar.gz", ".tgz")


def is_file_spec(text: str) -> bool:
    """An uploaded estimator, a file or a folder (anything that runs in the sandbox)."""
    return text.startswith("upload:") or text.lower().endswith(FILE_SUFFIXES) or _is_folder(text)


def _is_folder(text: str) -> bool:
    try:
        return Path(text).expanduser().is_dir()
    except (OSError, ValueError):  # a name too long for the file system, or one with a NUL byte
        return False


def stored_spec(spec: str) -> str:
    """``upload:<sha256>`` for a file spec, its package put in the artifact store first (the upload store,
    as the page and the CLI ingest it): what a job on another machine runs, which cannot read this one's
    paths. A lone ``.py`` is stored as a ``.py`` upload is (the same bytes, so the same ``code_sha256``)."""
    text = spec.strip()
    if text.startswith("upload:"):
        return text
    return f"upload:{ingest_path(Path(text).expanduser().resolve()).sha256}"


def shipped_spec(spec: str) -> dict:
    """What ships for a file spec: the mode, the files and, for a lone ``.py``, what it leaves behind."""
    text = spec.strip()
    if text.startswith("upload:"):
        upload = load_upload(text.split(":", 1)[1])
        return shipped_upload(upload)
    path = Path(text).expanduser().resolve()
    if path.is_dir():
        return {"mode": "folder", "files": sorted(folder_files(path)), "left_behind": [], "note": None}
    if path.suffix == ".py" and path.is_file():
        left = left_behind(path)
        return {"mode": "file", "files": [path.name], "left_behind": left, "note": shipped_alone_note(left)}
    upload = ingest_path(path)
    return shipped_upload(upload)


def shipped_upload(upload) -> dict:
    """``shipped`` for a stored upload (what a browser sent: nothing is known of the folder it came from)."""
    mode = {"py": "file", "tar.gz": "archive"}.get(upload.kind, upload.kind)
    return {"mode": mode, "files": [f.name for f in upload.files], "left_behind": [], "note": None}


class RoundAwareSandbox(SandboxedEstimator):
    """A sandboxed estimator that takes the wall and residual caps of the round it is set up for.

    ``runs`` gives ``setup`` a ``SetupContext`` (shape and budget, no caps); the
    round is the rulebook's when the caller names it (``round_tag``), else recovered from the shape, as
    the datasets carry it; it brings the round's caps and its grader's import rule. With explicit
    ``limits`` nothing is inferred.
    """

    def __init__(self, submission: SubmissionFiles, limits: SandboxLimits | None = None, *,
                 round_tag: str | None = None, **kwargs) -> None:
        self._explicit_limits = limits is not None
        self.round_tag = round_tag
        super().__init__(submission, None, limits, **kwargs)

    def setup(self, context) -> None:
        rnd = get_round(self.round_tag) if self.round_tag else round_for_shape(context.width, context.depth)
        if rnd is not None and not self._explicit_limits:
            self.limits = self.limits.for_round(rnd)
        super().setup(context)


def _handle(label: str, kind: str, digest: str, submission: SubmissionFiles, description: str,
            limits: SandboxLimits | None, should_cancel: Callable[[], bool] | None,
            class_label: str = "", round_tag: str | None = None) -> EstimatorHandle:
    return EstimatorHandle(
        label=label,
        kind=kind,
        code_sha256=digest,
        factory=lambda: RoundAwareSandbox(submission, limits, should_cancel=should_cancel, round_tag=round_tag),
        description=description,
        class_name=submission.class_name or class_label,
        submission_dir=str(submission.root),
    )


def sandboxed_handle(
    spec: str,
    *,
    limits: SandboxLimits | None = None,
    should_cancel: Callable[[], bool] | None = None,
    round_tag: str | None = None,
) -> EstimatorHandle:
    """The run handle for a file, folder or stored upload; the estimator runs in a sandbox worker.

    ``round_tag`` is the rulebook the run is scored under: its caps and its grader's import rule apply.
    """
    text = spec.strip()
    if text.startswith("upload:"):
        upload = load_upload(text.split(":", 1)[1])
        return _handle(upload.filename, "upload", upload.sha256, upload.submission,
                       f"uploaded {upload.filename} ({upload.short_hash}), sandboxed", limits, should_cancel,
                       _entry_class(upload), round_tag)
    path = Path(text).expanduser().resolve()
    if path.is_dir():
        upload = ingest_folder(path)
        return _handle(path.name, "file", upload.sha256, upload.submission,
                       f"{path} (folder, as `whest package` ships it; sandboxed worker)", limits, should_cancel,
                       _entry_class(upload), round_tag)
    if not path.is_file():
        raise FileNotFoundError(f"estimator file {path} does not exist")
    if path.suffix == ".py":
        check_size(path.stat().st_size)
        data = path.read_bytes()
        check_python_source(data, path.name)
        submission = SubmissionFiles.single_file(path)
        submission = replace(submission, class_name=None)
        return _handle(path.name, "file", hashlib.sha256(data).hexdigest(), submission,
                       f"{path} (sandboxed worker)", limits, should_cancel, guess_class_name(data), round_tag)
    upload = ingest_path(path)
    return _handle(path.name, "file", upload.sha256, upload.submission,
                   f"{path} (whest package archive, sandboxed worker)", limits, should_cancel, _entry_class(upload),
                   round_tag)


def _entry_class(upload) -> str:
    if upload.class_name:
        return upload.class_name
    return guess_class_name((upload.submission.root / upload.entry).read_bytes())
