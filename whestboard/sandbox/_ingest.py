"""Accept an uploaded estimator: a single ``.py``, a folder (or several files), or a ``whest package`` ``.tar.gz``.

A folder ships exactly the files ``whest package --estimator DIR`` would bundle (whestbench's own
``collect_submission_files``: its ignore rules, ``.gitignore``/``.whestignore``, never a secret), with
``estimator.py`` as its entry. A lone ``.py`` whose folder holds other files ships alone, as
``whest package --estimator FILE`` ships it; what it leaves behind is named (:func:`left_behind`), since
a ``setup()`` that reads a file next to it scores differently without it.

Nothing here runs participant code. An upload is checked, in this order,
before a byte of it is unpacked to disk:

1. its size, against whestbench's own cap (``whestbench.limits``: 50 MiB);
2. for a ``.py``: UTF-8 and syntactically valid Python (``compile`` only);
3. for a tarball: streamed through a decompression cap (a gzip bomb stops at
   50 MiB + tar overhead), every member a regular file (no symlinks, hard
   links or devices) with a relative, ``..``-free name, at most 50 files, and
   no name that is a file and another member's folder (``x`` and ``x/y``);
   then the manifest as whestbench judges it: its own ``validate_package`` on
   the (now bounded) archive, with its messages, so the verdict is exactly
   the grader's validator's (files it does not list, a README, are valid).

A valid upload is stored once per content hash in the artifact store (``whestboard.store._blobs``,
namespace ``upload``: the database every machine shares) and unpacked on demand into this
machine's cache under the state folder (``uploads/<sha256>/``, with a small ``upload.json``); runs
refer to it by that hash, so a job claimed on another machine finds the same files.

What an upload may cost the disk is bounded before anything is written, at every moment:

* **one upload** unpacks to at most :func:`unpacked_limit` bytes (whestbench's 50 MiB, or
  ``WHESTBOARD_UPLOAD_MAX_MB`` when smaller), counted from the archive's member headers as it is read;
* **one client** adds at most ``WHESTBOARD_UPLOADS_PER_CLIENT_MB`` within an hour, and **the shared store**
  holds at most ``WHESTBOARD_UPLOADS_MAX_MB``: checked by :func:`whestboard.store.put_blob_within` in
  the transaction that stores the upload (serialized across machines by a row lock), which drops
  uploads older than ``UPLOAD_KEEP_S`` to make room and refuses, with a sentence, when it cannot;
* **this machine's copy** under the state folder is pruned to fit ``WHESTBOARD_UPLOADS_MAX_MB`` before
  a folder is written there (:func:`make_room_here`), sparing only copies a job may be reading.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from whestbench.limits import MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES

from whestboard import config
from whestboard.sandbox._host import SubmissionFiles
from whestboard.store import (
    Quota,
    QuotaExceeded,
    blob_exists,
    blob_meta,
    fetch_blob_folder,
    pack_files,
    put_blob_within,
    stored_blob_keys,
)

BLOBS = "upload"
#: Uploads younger than this may still wait in a queue: never dropped to make room, and what counts
#: against their client's share.
UPLOAD_KEEP_S = 3600.0

MANIFEST = "manifest.json"
TAR_OVERHEAD_BYTES = 1 << 20  # headers and padding of up to 51 members, generously


class UploadError(ValueError):
    """An upload the app refuses; the message says what to change."""


class SourceSyntaxError(UploadError):
    """A source that does not compile; ``syntax_error`` is Python's own exception, as ``whest run`` reports it."""

    def __init__(self, message: str, syntax_error: SyntaxError) -> None:
        super().__init__(message)
        self.syntax_error = syntax_error


@dataclass(frozen=True)
class StoredFile:
    name: str
    size: int
    sha256: str


@dataclass
class Upload:
    """A validated estimator, stored under ``uploads/<sha256>/files``."""

    sha256: str
    filename: str
    kind: str  # "py", "tar.gz" or "folder"
    entry: str
    class_name: str | None
    files: list[StoredFile]
    root: Path
    created_at: float = field(default_factory=time.time)

    @property
    def submission(self) -> SubmissionFiles:
        return SubmissionFiles(root=self.root / "files", entry=self.entry, class_name=self.class_name)

    @property
    def short_hash(self) -> str:
        return self.sha256[:12]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["root"] = str(self.root)
        return data


def uploads_dir() -> Path:

    path = config.state_dir() / "uploads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- .py ---------------------------------------------------------------------------------------


#: Sources up to this size are compiled here for instant feedback; larger ones (never seen in
#: practice) are left to the sandbox, so a pathological file cannot tie up a web worker.
COMPILE_IN_APP_BYTES = 1 << 20


def check_python_source(data: bytes, name: str) -> None:
    """UTF-8, parseable Python: the cheapest failures, found without running anything."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UploadError(f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise UploadError(f"{name} is not valid Python source: it contains NUL bytes")
    if len(data) > COMPILE_IN_APP_BYTES:
        return
    try:
        compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise SourceSyntaxError(f"{name} line {exc.lineno}: {exc.msg} — fix the syntax error and upload again",
                                exc) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise UploadError(f"{name} is not valid Python source: {type(exc).__name__}: {exc}") from None


def guess_class_name(source: bytes) -> str:
    """The class whestbench's loader would most likely pick, read statically (nothing is executed).

    Only a label for display: the sandbox resolves the real class with ``whestbench.loader``.
    """
    import ast

    if len(source) > COMPILE_IN_APP_BYTES:
        return ""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if any(c.name == "Estimator" for c in classes):
        return "Estimator"
    derived = [c.name for c in classes if any("Estimator" in ast.unparse(base) for base in c.bases)]
    return derived[0] if len(derived) == 1 else ""


# --- .tar.gz -------------------------------------------------------------------------------------


class _CappedReader(io.RawIOBase):
    """A file object that refuses to yield more than ``cap`` bytes (decompression-bomb guard)."""

    def __init__(self, inner, cap: int) -> None:
        self.inner = inner
        self.cap = cap
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.inner.read(len(buffer))
        self.count += len(data)
        if self.count > self.cap:
            raise UploadError(f"the archive unpacks past {_cap_text()}; exclude large files via .whestignore")
        buffer[: len(data)] = data
        return len(data)


def _safe_member_name(name: str, what: str = "archive member") -> str:
    path = PurePosixPath(name)
    if not name or "\x00" in name or "\\" in name or str(path) == ".":
        raise UploadError(f"{what} {name!r} has an invalid name; give it a file name")
    if path.is_absolute():
        raise UploadError(f"{what} {name!r} is an absolute path; only relative paths are allowed")
    if ".." in path.parts:
        raise UploadError(f"{what} {name!r} climbs out of the archive with '..'")
    return str(path)


def _read_members(data: bytes) -> dict[str, bytes]:
    """Every regular file of the archive, in memory, with the caps enforced while streaming."""
    limit = unpacked_limit()
    cap = limit + TAR_OVERHEAD_BYTES
    members: dict[str, bytes] = {}
    total = 0
    try:
        stream = io.BufferedReader(_CappedReader(gzip.GzipFile(fileobj=io.BytesIO(data)), cap))
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                name = _safe_member_name(member.name)
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise UploadError(f"archive member {name!r} is a link; ship regular files only")
                if not member.isreg():
                    raise UploadError(f"archive member {name!r} is a special file; ship regular files only")
                if name in members:
                    raise UploadError(f"archive member {name!r} appears twice")
                if len(members) >= MAX_SUBMISSION_FILES + 1:  # + manifest.json
                    raise UploadError(f"the archive has more than {MAX_SUBMISSION_FILES} files (whestbench's cap)")
                total += member.size  # the header's claim, counted before a byte of the member is read
                if total > limit:
                    raise UploadError(f"the archive's files add up to {total / 2**20:.1f} MiB by member {name!r}, "
                                      f"over {_cap_text()}; ship less (exclude large files via .whestignore)")
                handle = archive.extractfile(member)
                members[name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UploadError(f"not a readable .tar.gz archive ({exc}); build it with `whest package`") from None
    refuse_file_folder_clashes(members, "archive member")
    return members


def refuse_file_folder_clashes(names, what: str) -> None:
    """Refuse a name that is a file and also the folder of another (``x`` and ``x/y``): no disk holds both."""
    present = set(names)
    for name in sorted(present):
        for parent in PurePosixPath(name).parents:
            if str(parent) in present:
                raise UploadError(f"{what} {str(parent)!r} is a file, but {name!r} needs a folder of that name; "
                                  "a submission cannot hold both — rename one")


def _check_manifest(data: bytes, members: dict[str, bytes]) -> tuple[str, str | None]:
    """The archive against its manifest, as whestbench judges it; returns ``(entry file, class name)``.

    The verdict is ``whestbench.validation.validate_package``'s, with its messages: what it accepts
    is accepted (files beside the ones the manifest lists, a README, an empty ``files[]``), what it
    refuses is refused. Only the safety checks of :func:`_read_members` come first.
    """
    _upstream_validation(data)
    entrypoint = json.loads(members[MANIFEST])["entrypoint"]
    entry = _safe_member_name(f"{entrypoint['module']}.py")
    if entry not in members:  # whestbench found it under a name that is not a plain relative path
        raise UploadError(f"manifest declares entrypoint module {entrypoint['module']!r}; the archive has no "
                          f"{entry} at a plain relative path; rebuild with `whest package`")
    class_name = entrypoint.get("class")
    return entry, class_name if isinstance(class_name, str) and class_name else None


def _upstream_validation(data: bytes) -> None:
    """whestbench's ``validate_package`` on the bytes, now known to be small and link-free."""
    from whestbench.validation import validate_package

    with tempfile.TemporaryDirectory(prefix="whestboard-upload-") as tmp:
        path = Path(tmp) / "submission.tar.gz"
        path.write_bytes(data)
        result = validate_package(path)
    if not result.ok:
        problems = "; ".join(f"[{issue.code}] {issue.message}" for issue in result.issues[:5])
        more = f" (and {len(result.issues) - 5} more)" if len(result.issues) > 5 else ""
        raise UploadError(f"whestbench rejects the archive: {problems}{more}")


# --- entry point ------------------------------------------------------------------------------------


def is_archive(filename: str) -> bool:
    """Whether a name is a ``whest package`` tarball's (a whole submission of its own)."""
    return filename.lower().endswith((".tar.gz", ".tgz"))


def kind_of(filename: str) -> str:
    lowered = filename.lower()
    if lowered.endswith(".py"):
        return "py"
    if lowered.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    raise UploadError(f"{filename or 'the upload'}: upload a .py file or the .tar.gz `whest package` writes")


def unpacked_limit() -> int:
    """The most one upload may hold unpacked: whestbench's own cap, or ``WHESTBOARD_UPLOAD_MAX_MB`` when
    the operator set it lower."""
    return min(MAX_SUBMISSION_BYTES, config.upload_max_bytes())


def _cap_text() -> str:
    """``whestbench's 50 MiB cap``, or this server's lower one."""
    limit = unpacked_limit()
    if limit == MAX_SUBMISSION_BYTES:
        return f"whestbench's {limit / 2**20:g} MiB cap"
    return f"this server's {limit / 2**20:g} MiB cap (WHESTBOARD_UPLOAD_MAX_MB)"


def check_size(size: int) -> None:
    """Refuse before reading further: the first check any upload path makes."""
    if size > unpacked_limit():
        raise UploadError(f"the upload is {size / 2**20:.1f} MiB, over {_cap_text()}")
    if size == 0:
        raise UploadError("the upload is empty")


def validate(data: bytes, filename: str) -> tuple[str, dict[str, bytes], str, str | None]:
    """``(kind, files, entry, class_name)`` of a valid upload, or :class:`UploadError`."""
    kind = kind_of(filename)
    check_size(len(data))
    if kind == "py":
        check_python_source(data, Path(filename).name)
        return kind, {"estimator.py": data}, "estimator.py", None
    members = _read_members(data)
    entry, class_name = _check_manifest(data, members)
    check_python_source(members[entry], entry)
    files = {name: body for name, body in members.items() if name != MANIFEST}
    return kind, files, entry, class_name


def ingest_upload(data: bytes, filename: str, *, client: str | None = None, store: Path | None = None) -> Upload:
    """Validate and store an upload (idempotent: the same bytes map to the same folder). ``client``: the
    hashed visitor whose share it counts against (None: the operator's own, the command line)."""
    kind, files, entry, class_name = validate(data, filename)
    return _store_files(sha256_hex(data), files, kind=kind, entry=entry, class_name=class_name,
                        filename=Path(filename).name, store=store, client=client)


def _store_files(digest: str, files: dict[str, bytes], *, kind: str, entry: str, class_name: str | None,
                 filename: str, store: Path | None, client: str | None = None) -> Upload:
    """Store a validated submission once in the shared store, within its bounds (nothing is written when
    they refuse it), then unpack it into this machine's copy (``<store>/<digest>/``)."""
    store = store or uploads_dir()
    if not blob_exists(BLOBS, digest):
        upload = Upload(sha256=digest, filename=filename, kind=kind, entry=entry, class_name=class_name,
                        files=[StoredFile(n, len(b), sha256_hex(b)) for n, b in sorted(files.items())],
                        root=store / digest)
        packed = pack_files({**{f"files/{name}": body for name, body in files.items()},
                             "upload.json": json.dumps(upload.as_dict(), indent=2).encode()})
        try:
            dropped = put_blob_within(BLOBS, digest, packed, upload_quota(client),
                                      meta={"filename": filename, "kind": kind})
        except QuotaExceeded as refused:
            raise UploadError(quota_sentence(refused)) from None
        for key in dropped:  # gone from the shared store: this machine's copy goes too, unless a job reads it
            _remove_copy(store / key, spare_in_use=True)
    return load_upload(digest, store=store)


def upload_quota(client: str | None) -> Quota:
    """The bounds an upload is stored within: the store's total, and the client's share of the last hour."""
    return Quota(max_bytes=config.uploads_store_bytes(), keep_s=UPLOAD_KEEP_S, owner=client,
                 owner_max_bytes=None if client is None else config.uploads_per_client_bytes())


def quota_sentence(refused: QuotaExceeded) -> str:
    """What a refused upload's sender reads: which bound, its numbers, and what to do."""
    wait = max(1, round(refused.retry_after_s / 60))
    if refused.what == "owner":
        return (f"not stored: your uploads of the last hour take {_mib(refused.used)} of this server's "
                f"{_mib(refused.limit)} per visitor (WHESTBOARD_UPLOADS_PER_CLIENT_MB) and this one needs "
                f"{_mib(refused.size)}; run an upload you made already (by its hash), ship less, or try again "
                f"in {wait} minute(s)")
    return (f"not stored: the upload store holds {_mib(refused.used)} of its {_mib(refused.limit)} "
            f"(WHESTBOARD_UPLOADS_MAX_MB), all uploaded within the last hour and possibly still waiting to "
            f"run, and this one needs {_mib(refused.size)}; try again in {wait} minute(s)")


def _mib(n: float) -> str:
    return f"{n / 2**20:.3g} MiB"


# --- folders ----------------------------------------------------------------------------------------

FOLDER_ENTRY = "estimator.py"


def folder_files(root: Path) -> dict[str, bytes]:
    """What ``whest package --estimator ROOT`` bundles, read into memory: sizes and count checked first."""
    from whestbench.packaging import collect_submission_files, enforce_submission_caps, resolve_submission

    try:
        resolve_submission(root)
    except FileNotFoundError as exc:
        raise UploadError(f"{exc}; a folder submission needs its estimator.py at the top") from None
    paths = collect_submission_files(root)
    try:
        enforce_submission_caps(paths)
    except ValueError as exc:
        raise UploadError(str(exc)) from None
    names = {str(p.relative_to(Path(root).resolve())): p for p in paths}
    if FOLDER_ENTRY not in names:
        raise UploadError(f"estimator.py is excluded by a .gitignore/.whestignore pattern in {root}, but it must ship")
    return {name: path.read_bytes() for name, path in names.items()}


def folder_digest(files: dict[str, bytes]) -> str:
    """One hash for a folder submission: its sorted file names with each file's sha256."""
    listing = [[name, sha256_hex(body)] for name, body in sorted(files.items())]
    return sha256_hex(json.dumps(listing, separators=(",", ":")).encode())


def ingest_folder(root: Path, *, store: Path | None = None, label: str | None = None,
                  client: str | None = None) -> Upload:
    """Validate and store a folder exactly as ``whest package --estimator ROOT`` would ship it."""
    root = Path(root)
    if not root.is_dir():
        raise UploadError(f"estimator folder not found: {root}")
    files = folder_files(root)
    check_python_source(files[FOLDER_ENTRY], FOLDER_ENTRY)
    return _store_files(folder_digest(files), files, kind="folder", entry=FOLDER_ENTRY, class_name=None,
                        filename=label or root.resolve().name, store=store, client=client)


def ingest_several(named: list[tuple[str, bytes]], *, store: Path | None = None,
                   client: str | None = None) -> Upload:
    """Several files picked together (the page): one folder submission, whatever order they came in.

    The files are laid out in a scratch folder and packaged from there, so the same ignore rules apply
    as to a folder on disk; one of them must be ``estimator.py``.
    """
    if len(named) > MAX_SUBMISSION_FILES:
        raise UploadError(f"{len(named)} files, over whestbench's {MAX_SUBMISSION_FILES}-file cap")
    check_size(sum(len(body) for _, body in named))
    names = [PurePosixPath(_safe_member_name(name, "picked file")).name for name, _ in named]
    if len(set(names)) != len(names):
        raise UploadError("two of the files have the same name; pick each file once")
    if FOLDER_ENTRY not in names:
        raise UploadError(f"none of the {len(names)} files is estimator.py: a folder submission's entry must be "
                          "named estimator.py (or upload estimator.py alone, or a `whest package` tarball)")
    with tempfile.TemporaryDirectory(prefix="whestboard-several-") as tmp:
        folder = Path(tmp) / "submission"
        folder.mkdir()
        for name, (_, body) in zip(names, named, strict=True):
            (folder / name).write_bytes(body)
        label = f"{len(names)} files ({', '.join(sorted(names)[:3])}{', ...' if len(names) > 3 else ''})"
        return ingest_folder(folder, store=store, label=label, client=client)


def left_behind(path: Path) -> list[str]:
    """What a lone ``.py`` leaves in its folder: what ``whest package --estimator DIR`` would have shipped too."""
    from whestbench.packaging import summarize_submission

    return list(summarize_submission(path).orphaned_siblings)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def shipped_alone_note(left: list[str]) -> str | None:
    """Before running: what a lone file leaves behind that ``whest package`` would ship with its folder.

    Only whestbench's own list (ignored and secret files are never named); whether the estimator needs
    any of it shows only when it runs (:func:`missing_files_note`).
    """
    if not left:
        return None
    verb = "was" if len(left) == 1 else "were"
    return (f"shipped alone: {_listed(left)} next to it {verb} not included (`whest package` would ship "
            f"{'it' if len(left) == 1 else 'them'} with the folder; whether the estimator needs "
            f"{'it' if len(left) == 1 else 'them'} shows when it runs); upload the folder or a "
            "`whest package` tarball")


def missing_files_note(missing: list[str]) -> str | None:
    """After running: the submission files the estimator tried to open and did not get."""
    if not missing:
        return None
    return (f"the estimator tried to open {_listed(missing)} next to it, which did not ship; upload the folder "
            "or a `whest package` tarball that holds "
            f"{'it' if len(missing) == 1 else 'them'}")


def _copy_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _in_use_since(now: float | None = None) -> float:
    """A copy read after this moment may be in a job's hands: no job runs longer than its wall time."""
    return (time.time() if now is None else now) - config.job_max_seconds()


def _remove_copy(folder: Path, *, spare_in_use: bool) -> bool:
    meta = folder / "upload.json"
    try:
        if spare_in_use and meta.stat().st_mtime > _in_use_since():
            return False
    except FileNotFoundError:
        pass
    shutil.rmtree(folder, ignore_errors=True)
    return True


def make_room_here(size: int, store: Path | None = None, *, max_bytes: int | None = None,
                   now: float | None = None) -> int:
    """Make room for ``size`` bytes in this machine's copy of the upload store, within
    ``WHESTBOARD_UPLOADS_MAX_MB``: copies the shared store no longer holds go first, then the least recently
    read; a copy read within a job's wall time (``WHESTBOARD_JOB_WALL_S``) stays, a job may be reading it.
    Returns how many copies went; :class:`UploadError` when the copies in use leave no room."""
    store = store or uploads_dir()
    limit = config.uploads_store_bytes() if max_bytes is None else max_bytes
    copies = [(meta.stat().st_mtime, _copy_bytes(meta.parent), meta.parent) for meta in store.glob("*/upload.json")]
    total = sum(size_ for _, size_, _ in copies)
    if total + size <= limit:
        return 0
    shared = stored_blob_keys(BLOBS, [folder.name for _, _, folder in copies])
    in_use_since, removed = _in_use_since(now), 0
    for read_at, copy_size, folder in sorted(copies, key=lambda c: (c[2].name in shared, c[0])):
        if total + size <= limit:
            break
        if read_at > in_use_since:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        total -= copy_size
        removed += 1
    if total + size > limit:
        raise UploadError(f"this machine's copy of the upload store holds {_mib(total)} of its "
                          f"{_mib(limit)} (WHESTBOARD_UPLOADS_MAX_MB), all of it read by jobs within "
                          f"the last {config.job_max_seconds() / 60:.0f} minutes; try again when they end")
    return removed


def ingest_path(path: Path, *, store: Path | None = None, client: str | None = None) -> Upload:
    """The CLI's door: the same checks as the page, size first; a folder ships as ``whest package`` ships it."""
    path = Path(path)
    if path.is_dir():
        return ingest_folder(path, store=store, client=client)
    if not path.is_file():
        raise UploadError(f"estimator file not found: {path}")
    kind_of(path.name)
    check_size(path.stat().st_size)
    return ingest_upload(path.read_bytes(), path.name, store=store, client=client)


def load_upload(digest: str, *, store: Path | None = None) -> Upload:
    """A stored upload by its sha256, unpacked from the shared store into this machine's cache folder
    when it is not there yet (KeyError when the store has none)."""
    if not digest or not all(c in "0123456789abcdef" for c in digest):
        raise KeyError(f"no upload {digest!r}")
    store = store or uploads_dir()
    root = store / digest
    meta = root / "upload.json"
    if not meta.is_file() and not (_fetch_copy(digest, store) and meta.is_file()):
        raise KeyError(f"no upload {digest!r}")
    _mark_read(meta)
    raw = json.loads(meta.read_text())
    raw["files"] = [StoredFile(**f) for f in raw["files"]]
    raw["root"] = root
    known = set(Upload.__dataclass_fields__)
    return Upload(**{key: value for key, value in raw.items() if key in known})


#: A copy's last read is marked at most this often (its upload.json's mtime: what eviction reads).
MARK_READ_EVERY_S = 60.0


def _mark_read(meta: Path) -> None:
    try:
        if meta.stat().st_mtime < time.time() - MARK_READ_EVERY_S:
            os.utime(meta)
    except OSError:
        pass


def _fetch_copy(digest: str, store: Path) -> bool:
    """Unpack the shared store's upload into this machine's copy, room made first (one writer at a time
    per machine, so two fetches cannot both count the same room). False when the store has none."""
    info = blob_meta(BLOBS, digest)
    if info is None:
        return False
    store.mkdir(parents=True, exist_ok=True)
    with open(store / ".copies.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (store / digest / "upload.json").is_file():
            return True
        make_room_here(int(info["size"]), store)
        return fetch_blob_folder(BLOBS, digest, store / digest)
