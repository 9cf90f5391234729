"""Upload validation (sizes before unpacking, manifests as ``whest package`` writes them) and the deployment switch."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from whestbench.limits import MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES
from whestbench.packaging import package_submission

from whestboard import config
from whestboard.sandbox import _ingest
from whestboard.sandbox._ingest import UploadError

ESTIMATOR = textwrap.dedent('''
    import flopscope.numpy as fnp
    from whestbench import BaseEstimator

    from helper import ZERO


    class Estimator(BaseEstimator):
        def predict(self, mlp, budget):
            return fnp.zeros((mlp.depth, mlp.width)) + ZERO
''')


@pytest.fixture()
def store(tmp_path) -> Path:
    return tmp_path / "uploads"


@pytest.fixture()
def packaged(tmp_path) -> Path:
    """A folder submission packaged by whestbench's own ``whest package`` code."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "estimator.py").write_text(ESTIMATOR)
    (folder / "helper.py").write_text("ZERO = 0.0\n")
    (folder / "notes.txt").write_text("shipped alongside\n")
    return package_submission(folder, output_path=tmp_path / "submission.tar.gz")


def rebuild(archive: Path, *, change=None, extra: dict[str, bytes] | None = None, drop=()) -> bytes:
    """The archive's members re-packed, optionally altered (for tampering tests)."""
    members: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            members[member.name] = tar.extractfile(member).read()
    for name in drop:
        members.pop(name)
    if change:
        change(members)
    members.update(extra or {})
    return tarball(members)


def tarball(members: dict[str, bytes], special: list[tarfile.TarInfo] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        for info in special:
            tar.addfile(info)
    return buffer.getvalue()


def manifest_for(files: dict[str, bytes]) -> bytes:
    return json.dumps({
        "schema_version": "1.0", "api_version": "2.0", "entrypoint": {"module": "estimator", "class": "Estimator"},
        "files": [{"name": n, "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()],
    }).encode()


# -- single files ---------------------------------------------------------------------------------


def test_a_python_file_is_stored_once_under_its_hash(store):
    data = b"from whestbench import BaseEstimator\nclass Mine(BaseEstimator):\n    def predict(self, m, b):\n        pass\n"
    upload = _ingest.ingest_upload(data, "my_solution.py", store=store)
    assert upload.sha256 == hashlib.sha256(data).hexdigest()
    assert upload.kind == "py" and upload.filename == "my_solution.py"
    assert (upload.root / "files" / "estimator.py").read_bytes() == data  # shipped as estimator.py, as whest does
    assert _ingest.ingest_upload(data, "again.py", store=store).root == upload.root
    assert _ingest.load_upload(upload.sha256, store=store).files == upload.files
    assert _ingest.guess_class_name(data) == "Mine"


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"def predict(:\n", "bad.py", "bad.py line 1"),
        (b"\xff\xfe not text", "latin.py", "not UTF-8"),
        (b"", "empty.py", "empty"),
        (b"print(1)", "estimator.zip", "upload a .py file or the .tar.gz"),
        (b"x = 1\x00\n", "nul.py", "not valid Python"),
    ],
)
def test_bad_python_files_are_refused_with_what_to_fix(store, data, name, message):
    with pytest.raises(UploadError, match=message):
        _ingest.ingest_upload(data, name, store=store)
    assert not store.exists() or not any(store.iterdir())


def test_size_is_checked_before_the_file_is_read(tmp_path, store):
    big = tmp_path / "huge.py"
    with big.open("wb") as out:
        out.truncate(MAX_SUBMISSION_BYTES + 1)  # sparse: nothing to read, only a size to refuse
    with pytest.raises(UploadError, match="over whestbench's 50 MiB cap"):
        _ingest.ingest_path(big, store=store)


# -- archives ---------------------------------------------------------------------------------------


def test_a_whest_package_archive_is_verified_and_unpacked(packaged, store):
    data = packaged.read_bytes()
    upload = _ingest.ingest_upload(data, packaged.name, store=store)
    assert upload.kind == "tar.gz" and upload.sha256 == hashlib.sha256(data).hexdigest()
    assert upload.class_name == "Estimator" and upload.entry == "estimator.py"
    names = sorted(f.name for f in upload.files)
    assert names == ["estimator.py", "helper.py", "notes.txt"]
    files = upload.submission.root
    assert (files / "helper.py").read_text() == "ZERO = 0.0\n" and not (files / "manifest.json").exists()
    for stored in upload.files:
        assert hashlib.sha256((files / stored.name).read_bytes()).hexdigest() == stored.sha256


def _tamper(members: dict[str, bytes]) -> None:
    members["helper.py"] = b"ZERO = 1.0\n"


def _no_entrypoint(members: dict[str, bytes]) -> None:
    manifest = json.loads(members["manifest.json"])
    manifest["entrypoint"]["module"] = "solution"
    members["manifest.json"] = json.dumps(manifest).encode()


def _old_schema(members: dict[str, bytes]) -> None:
    manifest = json.loads(members["manifest.json"])
    manifest["schema_version"] = "0.9"
    members["manifest.json"] = json.dumps(manifest).encode()


def _empty_files_list(members: dict[str, bytes]) -> None:
    manifest = json.loads(members["manifest.json"])
    manifest["files"] = []
    members["manifest.json"] = json.dumps(manifest).encode()


def _validate_package(data: bytes, tmp_path: Path):
    """whestbench's own verdict on the archive: the oracle."""
    from whestbench.validation import validate_package

    path = tmp_path / "oracle.tar.gz"
    path.write_bytes(data)
    return validate_package(path)


@pytest.mark.parametrize(
    "kwargs",
    [{"change": _tamper}, {"drop": ["manifest.json"]}, {"drop": ["helper.py"]}, {"change": _no_entrypoint},
     {"change": _old_schema}],
    ids=["sha256-mismatch", "no-manifest", "listed-file-missing", "no-entrypoint-file", "old-schema"],
)
def test_archives_whestbench_refuses_are_refused_with_its_message(packaged, store, tmp_path, kwargs):
    data = rebuild(packaged, **kwargs)
    verdict = _validate_package(data, tmp_path)
    assert not verdict.ok
    with pytest.raises(UploadError) as refused:
        _ingest.ingest_upload(data, "submission.tar.gz", store=store)
    for issue in verdict.issues:
        assert f"[{issue.code}] {issue.message}" in str(refused.value)


@pytest.mark.parametrize(
    "kwargs",
    [{"extra": {"README.md": b"# my estimator\n", "docs/notes.txt": b"unlisted\n", "alt.py": b"X = 2\n"}},
     {"change": _empty_files_list}],
    ids=["unlisted-readme-and-extras", "empty-files-list"],
)
def test_archives_whestbench_accepts_are_accepted_and_ship_every_file(packaged, store, tmp_path, kwargs):
    data = rebuild(packaged, **kwargs)
    assert _validate_package(data, tmp_path).ok
    upload = _ingest.ingest_upload(data, "submission.tar.gz", store=store)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        expected = sorted(m.name for m in tar.getmembers() if m.name != "manifest.json")
    assert sorted(f.name for f in upload.files) == expected  # the grader unpacks them all beside the entry
    assert (upload.submission.root / "helper.py").read_text() == "ZERO = 0.0\n"


@pytest.mark.parametrize(
    ("members", "message"),
    [({"x": b"a file", "x/y": b"in a folder x"}, "'x' is a file, but 'x/y' needs a folder"),
     ({".": b"dot"}, "'.' has an invalid name")],
    ids=["file-and-folder", "dot"],
)
def test_archive_members_no_disk_can_hold_are_refused_with_a_sentence(store, members, message):
    files = {"estimator.py": ESTIMATOR.encode(), **members}
    with pytest.raises(UploadError, match=message):
        _ingest.ingest_upload(tarball({**files, "manifest.json": manifest_for(files)}),
                       "submission.tar.gz", store=store)
    assert not store.exists() or not any(store.iterdir())


def test_a_picked_file_named_dot_is_refused_with_a_sentence(store):
    with pytest.raises(UploadError, match="picked file '.' has an invalid name"):
        _ingest.ingest_several([("estimator.py", ESTIMATOR.encode()), (".", b"x")], store=store)


def _special(kind: bytes, name: str = "evil", linkname: str = "/etc/passwd") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


@pytest.mark.parametrize(
    ("members", "special", "message"),
    [
        ({"/etc/cron.d/evil": b"x"}, [], "absolute path"),
        ({"../outside.py": b"x"}, [], "climbs out"),
        ({"a/../../outside.py": b"x"}, [], "climbs out"),
        ({}, [_special(tarfile.SYMTYPE)], "is a link"),
        ({}, [_special(tarfile.LNKTYPE, linkname="estimator.py")], "is a link"),
        ({}, [_special(tarfile.CHRTYPE)], "special file"),
        ({}, [_special(tarfile.FIFOTYPE)], "special file"),
    ],
)
def test_hostile_archive_members_are_refused_before_anything_is_written(store, members, special, message):
    files = {"estimator.py": ESTIMATOR.encode(), **members}
    data = tarball({**files, "manifest.json": manifest_for(files)}, special)
    with pytest.raises(UploadError, match=message):
        _ingest.ingest_upload(data, "submission.tar.gz", store=store)
    assert not store.exists() or not any(store.iterdir())


def test_more_files_than_whestbench_allows_are_refused(store):
    files = {"estimator.py": ESTIMATOR.encode(), **{f"data/{n}.txt": b"x" for n in range(MAX_SUBMISSION_FILES)}}
    with pytest.raises(UploadError, match="more than 50 files"):
        _ingest.ingest_upload(tarball({**files, "manifest.json": manifest_for(files)}), "s.tar.gz", store=store)


def test_a_gzip_bomb_stops_at_the_cap_without_unpacking_it(store):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:  # 200 MiB of zeros, ~200 KB compressed
        info = tarfile.TarInfo("estimator.py")
        info.size = 200 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    data = gzip.compress(raw.getvalue(), compresslevel=9)
    assert len(data) < 1 << 20
    started = time.monotonic()
    with pytest.raises(UploadError, match=r"add up to 200\.0 MiB by member 'estimator\.py', over whestbench's 50 MiB"):
        _ingest.ingest_upload(data, "bomb.tar.gz", store=store)  # read off the member's header, never unpacked
    assert time.monotonic() - started < 10


def test_garbage_is_not_an_archive(store):
    with pytest.raises(UploadError, match="not a readable .tar.gz"):
        _ingest.ingest_upload(b"definitely not gzip" * 100, "submission.tar.gz", store=store)


# -- the deployment switch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("under_gunicorn", "flag", "allowed"),
    [(False, None, True), (True, None, False), (True, "1", True), (False, "0", False), (True, "yes", True)],
)
def test_uploads_are_on_locally_and_opt_in_under_gunicorn(monkeypatch, under_gunicorn, flag, allowed):
    if flag is None:
        monkeypatch.delenv("WHESTBOARD_ALLOW_UPLOADS", raising=False)
    else:
        monkeypatch.setenv("WHESTBOARD_ALLOW_UPLOADS", flag)
    assert config.uploads_allowed(under_gunicorn=under_gunicorn) is allowed


@pytest.fixture()
def dash_app(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("WHESTBOARD_ALLOW_UPLOADS", raising=False)
    import app

    previous = app.server.config["WHESTBOARD_UNDER_GUNICORN"]
    yield app
    app.server.config["WHESTBOARD_UNDER_GUNICORN"] = previous


def _accept_request(source: bytes, name: str) -> dict:
    contents = "data:text/x-python;base64," + base64.b64encode(source).decode()
    outputs = [{"id": "upload-sha", "property": "data"}, {"id": "upload-file-status", "property": "children"},
               {"id": "upload-run", "property": "disabled"}]
    return {
        "output": "..upload-sha.data...upload-file-status.children...upload-run.disabled..",
        "outputs": outputs,
        "inputs": [{"id": "upload-file", "property": "contents", "value": contents}],
        "state": [{"id": "upload-file", "property": "filename", "value": name}],
        "changedPropIds": ["upload-file.contents"],
    }


def test_the_server_refuses_uploads_when_the_switch_is_off(dash_app, tmp_path):
    from pages import upload as page

    dash_app.server.config["WHESTBOARD_UNDER_GUNICORN"] = True
    with dash_app.server.test_request_context("/upload"):
        layout = page.layout()
    text = json.dumps(layout.to_plotly_json(), default=str)
    assert "upload-disabled" in text and "WHESTBOARD_ALLOW_UPLOADS=1" in text and "upload-file" not in text

    client = dash_app.server.test_client()
    source = (Path(__file__).parent / "hostile" / "good.py").read_bytes()
    refused = client.post("/_dash-update-component", json=_accept_request(source, "good.py"))
    assert refused.status_code == 200 and "Uploads are disabled on this server" in refused.get_data(as_text=True)
    assert not (tmp_path / "state" / "uploads").exists() or not any((tmp_path / "state" / "uploads").iterdir())

    dash_app.server.config["WHESTBOARD_UNDER_GUNICORN"] = False
    accepted = client.post("/_dash-update-component", json=_accept_request(source, "good.py"))
    assert hashlib.sha256(source).hexdigest() in accepted.get_data(as_text=True)


def test_an_oversized_callback_request_is_refused_before_it_is_parsed(dash_app):
    from server import http

    client = dash_app.server.test_client()
    response = client.post("/_dash-update-component", data=b" " * (http.max_callback_bytes() + 1),
                           content_type="application/json")
    assert response.status_code == 413


def test_a_callback_request_nested_past_the_recursion_limit_gets_a_sentence_not_a_500(dash_app):
    client = dash_app.server.test_client()
    response = client.post("/_dash-update-component", data=b"[" * 100_000 + b"]" * 100_000,
                           content_type="application/json")
    assert response.status_code == 400 and "nested too deeply" in response.get_json()["error"]


@pytest.fixture()
def bounded(tmp_path, monkeypatch):
    """A store of its own (its database too) with small bounds: 0.1 MiB in all, 0.05 MiB per client an hour."""
    from whestboard.store import reset_engines

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_UPLOADS_MAX_MB", "0.1")
    monkeypatch.setenv("WHESTBOARD_UPLOADS_PER_CLIENT_MB", "0.05")
    reset_engines()
    yield tmp_path / "state" / "uploads"
    reset_engines()


def _source(i: int, size: int = 10_000) -> bytes:
    return f"x = {i}\n".encode() + b"#" * size + b"\n"


def _held(store: Path) -> tuple[int, int]:
    """(bytes in the shared store, bytes in this machine's copy)."""
    from whestboard.store import namespace_size

    here = sum(p.stat().st_size for p in store.rglob("*") if p.is_file() and p.name != ".copies.lock")
    return namespace_size(_ingest.BLOBS)[1], here


def test_a_clients_share_is_refused_at_the_moment_of_storing_with_its_numbers(bounded):
    limit = 0.1 * 2**20
    alice = [_ingest.ingest_upload(_source(i), f"a{i}.py", client="alice", store=bounded) for i in range(2)]
    with pytest.raises(UploadError) as refused:
        _ingest.ingest_upload(_source(2), "a2.py", client="alice", store=bounded)
    text = str(refused.value)
    assert text.startswith("not stored: your uploads of the last hour take ")
    assert "of this server's 0.05 MiB per visitor (WHESTBOARD_UPLOADS_PER_CLIENT_MB)" in text
    assert "try again in 60 minute(s)" in text
    assert _ingest.sha256_hex(_source(2)) not in {p.name for p in bounded.iterdir()}  # nothing written
    # the same bytes again add nothing and are not refused; another client has a share of its own
    assert _ingest.ingest_upload(_source(0), "a0.py", client="alice", store=bounded).sha256 == alice[0].sha256
    _ingest.ingest_upload(_source(3), "b3.py", client="bob", store=bounded)
    shared, here = _held(bounded)
    assert shared <= limit and here <= limit and shared > 3 * 10_000


def test_the_store_refuses_when_full_of_young_uploads_and_drops_old_ones_for_room(bounded, monkeypatch):
    from sqlalchemy import text

    from whestboard.store import blob_keys, session

    limit = 0.1 * 2**20
    stored = [_ingest.ingest_upload(_source(i), f"c{i}.py", client=f"client-{i}", store=bounded) for i in range(3)]
    with pytest.raises(UploadError, match=r"^not stored: the upload store holds .* of its 0.1 MiB "
                                          r"\(WHESTBOARD_UPLOADS_MAX_MB\), all uploaded within the last hour"):
        _ingest.ingest_upload(_source(9, 40_000), "c9.py", client="client-9", store=bounded)
    assert _held(bounded)[0] <= limit
    # an hour on, the oldest may go: it is dropped, from the shared store and from this machine's copy
    with session() as s:
        s.execute(text("update blobs set created_at = :at where namespace = :ns and key = :key"),
                  {"at": time.time() - 2 * 3600, "ns": _ingest.BLOBS, "key": stored[0].sha256})
    old = time.time() - 7200
    import os

    os.utime(stored[0].root / "upload.json", (old, old))
    late = _ingest.ingest_upload(_source(9, 40_000), "c9.py", client="client-9", store=bounded)
    assert stored[0].sha256 not in blob_keys(_ingest.BLOBS) and not stored[0].root.exists()
    assert late.root.is_dir()
    shared, here = _held(bounded)
    assert shared <= limit and here <= limit


def test_this_machines_copy_keeps_within_the_bound_sparing_copies_in_use(bounded):
    import os

    from whestboard.store import remove_blob

    a, b = (_ingest.ingest_upload(_source(i), f"d{i}.py", store=bounded) for i in range(2))
    old = time.time() - 7200
    for upload in (a, b):
        os.utime(upload.root / "upload.json", (old, old))
    remove_blob(_ingest.BLOBS, b.sha256)  # dropped from the shared store by another machine
    copy = _ingest._copy_bytes(a.root)
    # room for one more copy: the one the store no longer holds goes first, though a was read no later
    assert _ingest.make_room_here(copy, bounded, max_bytes=2 * copy + 100) == 1
    assert a.root.is_dir() and not b.root.exists()
    os.utime(a.root / "upload.json")  # read just now: a job may be reading it
    with pytest.raises(UploadError, match=r"this machine's copy of the upload store holds .* read by jobs"):
        _ingest.make_room_here(copy, bounded, max_bytes=copy + 100)
    assert a.root.is_dir()


def test_huge_sources_are_left_to_the_sandbox_not_compiled_in_the_app(store):
    body = b"x = (" + b"1 + " * (_ingest.COMPILE_IN_APP_BYTES // 4) + b"1)\n"
    upload = _ingest.ingest_upload(body, "big.py", store=store)
    assert upload.kind == "py" and _ingest.guess_class_name(body) == ""
