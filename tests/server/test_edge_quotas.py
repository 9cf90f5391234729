"""Issue 38's limits, replayed as a hostile visitor plays them against the production stack:
``./scripts/serve.sh`` (nginx before gunicorn, 2 workers x 2 threads), Redis with its append-only file,
uploads on, an organizer token set; plain HTTP posts to ``/_dash-update-component`` from several loopback
addresses (127.0.0.1, .2, .3: three clients as the front sees them).

* rotating the User-Agent buys no job slot: one address holds ``WHESTBOARD_JOB_PER_CLIENT`` (2), a second
  address its own 2, a third is refused by ``WHESTBOARD_JOB_TOTAL`` (4); sixteen launches at the same moment
  from each address do no better;
* a 60 KiB package with a 45 MiB member of zeros, posted 20 times (the upload page and the final page's
  drop zone): each client stores at most ``WHESTBOARD_UPLOADS_PER_CLIENT_MB`` (100 here) and the store
  never more than ``WHESTBOARD_UPLOADS_MAX_MB`` (150 here), in the shared store and on this machine, after
  every request; the rest are refused with a sentence;
* a final launched from the page leaves no byte of the organizer token in Redis or its append-only file
  (plain, or base64 as kombu carries a task's body), and a hand-made final job without the page's grant
  is refused before it is launched;
* a pickle planted in Redis under every cache key the site uses is never run: the site restarted on it
  serves the leaderboard and the convergence page, and signs what it stores again.

``/healthz`` answers after each. Jobs stay queued where no Celery worker runs, so a slot stays taken
without burning a core.
"""

from __future__ import annotations

import base64
import json
import pickle
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import redis
import requests
from requests.adapters import HTTPAdapter

from components.shell import JOB_NOTICE_ID
from tests.final.participants import MEAN
from tests.prod_support import celery_worker, load_dashclient, redis_server, serve_stack
from whestboard.cache import KEY_PREFIX, SIGNED_MAGIC

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

TOKEN = "edge-quota-organizer-token-5f1d2c"
MIB = 1 << 20
PER_CLIENT_MB, STORE_MB = 100, 150
ZEROS_MB = 45
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


class _FromAddress(HTTPAdapter):
    """Connections made from one loopback address: a client the front sees as that address."""

    def __init__(self, source: str) -> None:
        self.source = source
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.source, 0)
        return super().init_poolmanager(*args, **kwargs)


class Launching(dashclient.DashClient):
    """A visitor from ``source`` who starts background jobs and reads each one's first answer (launched, or
    the sentence refusing it) without waiting for it to run."""

    def __init__(self, base: str, source: str) -> None:
        super().__init__(base, timeout=60)
        self.http.mount("http://", _FromAddress(source))
        self.answers: list[str | None] = []

    def _run_background(self, dep: dict, body: dict, label: str, max_seconds: float) -> dict:
        first, _ = self.post(body, {}, "bg-start", label)
        poll = json.loads(json.dumps(body))
        for arg in poll["inputs"] + poll["state"]:
            arg["value"] = None
        data, _ = self.post(poll, {"cacheKey": first["cacheKey"], "job": first["job"]}, "bg-poll", label)
        self.answers.append(((data.get("sideUpdate") or {}).get(JOB_NOTICE_ID) or {}).get("children"))
        return {}


def visitor(base: str, source: str, path: str, **headers: str):
    client = Launching(base, source)
    client.http.headers.update(headers)
    return client, dashclient.PageSession(client, path).load()


def healthy(base: str) -> None:
    assert requests.get(base + "/healthz", timeout=10).status_code == 200


def ledger(state: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(state / "whestboard.sqlite") as db:
        return db.execute(sql).fetchall()


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """The stack without a Celery worker: a launched job stays queued, holding its slot."""
    with redis_server() as url, serve_stack(
            tmp_path_factory.mktemp("edge-quotas") / "state", WHESTBOARD_REDIS_URL=url, WHESTBOARD_ALLOW_UPLOADS="1",
            WHESTBOARD_ORGANIZER_TOKEN=TOKEN, WHESTBOARD_JOB_PER_CLIENT="2", WHESTBOARD_JOB_TOTAL="4",
            WHESTBOARD_UPLOADS_PER_CLIENT_MB=str(PER_CLIENT_MB), WHESTBOARD_UPLOADS_MAX_MB=str(STORE_MB)) as server:
        yield server


# --------------------------------------------------------------------------- job slots


def test_a_new_user_agent_per_request_buys_no_job_slot_and_each_address_has_its_own(front):
    one, lab = visitor(front.base, ADDRESSES[0], "/lab")
    for i in range(4):  # the attack: every launch under a User-Agent never seen before
        one.http.headers["User-Agent"] = f"agent-{i}-{time.time_ns()}"
        lab.click("lab-run")
    assert one.answers[:2] == [None, None], one.answers
    assert all(a and "You already have 2 job(s) queued or running (this server allows 2 per visitor)" in a
               for a in one.answers[2:]), one.answers

    two, lab_two = visitor(front.base, ADDRESSES[1], "/lab", **{"User-Agent": "agent-0"})
    for _ in range(3):
        lab_two.click("lab-run")
    assert two.answers[:2] == [None, None] and "You already have 2 job(s)" in (two.answers[2] or ""), two.answers

    three, lab_three = visitor(front.base, ADDRESSES[2], "/lab")
    lab_three.click("lab-run")
    assert "This server is running 4 jobs, its limit (WHESTBOARD_JOB_TOTAL = 4)" in (three.answers[0] or "")

    owners = ledger(front.state_dir, "select owner, count(*) from jobs where backend != 'queue' "
                                     "and status in ('queued', 'running') group by owner")
    assert sorted(n for _, n in owners) == [2, 2]  # two clients, two slots each: the four of the deployment
    print(f"job slots: address 1 under 4 User-Agents {one.answers.count(None)} of 4 launched, address 2 "
          f"{two.answers.count(None)} of 3, address 3 {three.answers.count(None)} of 1")
    healthy(front.base)


@pytest.fixture(scope="module")
def busy_front(tmp_path_factory):
    """The stack with 2 workers x 8 threads, so sixteen launches from one address land at the same moment."""
    with redis_server() as url, serve_stack(tmp_path_factory.mktemp("edge-slots") / "state", workers=2, threads=8,
                                            WHESTBOARD_REDIS_URL=url, WHESTBOARD_JOB_PER_CLIENT="2",
                                            WHESTBOARD_JOB_TOTAL="4") as server:
        yield server


def test_launches_at_the_same_moment_never_take_more_than_the_slots(busy_front):
    """Sixteen lab runs posted at once from one address, then from a second and a third: each address gets
    its 2 slots and no more, the third none (the total of 4); the slots are counted and the job recorded in
    one locked transaction (before, 8 at once from one address held 3 slots of its 2)."""
    _, deps = dashclient.DashClient(busy_front.base, timeout=120).open("/lab")
    dep = next(d for d in deps if d["output"].lstrip(".").startswith("lab-job-result.data"))
    body = {"output": dep["output"], "outputs": {"id": "lab-job-result", "property": "data"},
            "inputs": [{"id": "lab-job", "property": "data", "value": {
                "dataset": "v1-warmup", "mlps": "0", "spec": "mean", "budget": None, "nonce": 1}}],
            "state": [], "changedPropIds": ["lab-job.data"]}

    def burst(source: str) -> list[str]:
        ready, handles = threading.Barrier(16), []

        def launch() -> None:
            http = requests.Session()
            http.mount("http://", _FromAddress(source))
            ready.wait()
            answer = http.post(busy_front.base + "/_dash-update-component", json=body, timeout=120)
            handles.append(answer.json()["job"])

        threads = [threading.Thread(target=launch) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return handles

    launched = [sum(not h.startswith("refused~") for h in burst(source)) for source in ADDRESSES]
    owners = ledger(busy_front.state_dir, "select owner, count(*) from jobs where backend != 'queue' group by owner")
    assert launched == [2, 2, 0] and sorted(n for _, n in owners) == [2, 2], (launched, owners)
    print(f"sixteen launches at once from each of three addresses: {launched} launched")
    healthy(busy_front.base)


# --------------------------------------------------------------------------- the upload store


@pytest.fixture(scope="module")
def zeros_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("zeros") / "submission"
    folder.mkdir()
    with open(folder / "zeros.bin", "wb") as out:
        out.truncate(ZEROS_MB * MIB)
    return folder


def zeros_package(folder: Path, variant: str) -> tuple[str, bytes]:
    """A valid ``whest package`` of mean propagation and a 45 MiB member of zeros, unique per ``variant``."""
    from whestbench.packaging import package_submission

    (folder / "estimator.py").write_text(MEAN + f"\n# {variant}\n")
    path = package_submission(folder, output_path=folder.parent / f"{variant}.tar.gz")
    return Path(path).name, Path(path).read_bytes()


def data_url(body: bytes) -> str:
    return "data:application/gzip;base64," + base64.b64encode(body).decode()


def held(state: Path) -> tuple[int, int]:
    """(bytes of uploads in the shared store, bytes of this machine's copy under the state folder)."""
    ((shared,),) = ledger(state, "select coalesce(sum(size), 0) from blobs where namespace = 'upload'")
    here = sum(p.stat().st_size for p in (state / "uploads").rglob("*") if p.is_file() and p.name != ".copies.lock")
    return int(shared), here


def post_upload(page, name: str, body: bytes) -> str | None:
    """The upload page's drop zone; the stored upload's hash, or None with the sentence in the status."""
    page.values.setdefault("upload-file", {})["filename"] = [name]
    page.click("upload-file", "contents", [data_url(body)])
    return page.values["upload-sha"].get("data")


def test_uploads_are_bounded_per_client_and_in_all_when_stored_through_both_drop_zones(front, zeros_folder):
    name, body = zeros_package(zeros_folder, "probe")
    assert len(body) < 100 * 1024  # the 60 KiB package: 45 MiB of zeros inside
    _, page = visitor(front.base, ADDRESSES[0], "/upload")
    stored, refusals, peaks = [], [], []
    started = time.monotonic()
    for i in range(20):  # the twenty posts in a row, each a package never stored before
        sha = post_upload(page, *zeros_package(zeros_folder, f"a{i}"))
        (stored if sha else refusals).append(sha or str(page.values["upload-file-status"]["children"]))
        peaks.append(held(front.state_dir))
    took = time.monotonic() - started
    assert len(stored) == PER_CLIENT_MB // (ZEROS_MB + 1)  # 2: a third would take the client past 100 MiB
    assert all("not stored: your uploads of the last hour take" in r and
               f"of this server's {PER_CLIENT_MB} MiB per visitor (WHESTBOARD_UPLOADS_PER_CLIENT_MB)" in r
               for r in refusals), refusals[:1]
    assert max(shared for shared, _ in peaks) <= PER_CLIENT_MB * MIB
    healthy(front.base)

    # a second address has a share of its own, until the store's total is reached
    _, second = visitor(front.base, ADDRESSES[1], "/upload")
    second_results = [post_upload(second, *zeros_package(zeros_folder, f"b{i}")) for i in range(3)]
    peaks.append(held(front.state_dir))
    assert second_results[0] and not any(second_results[1:])
    assert (f"not stored: the upload store holds 135 MiB of its {STORE_MB} MiB (WHESTBOARD_UPLOADS_MAX_MB)"
            in str(second.values["upload-file-status"]["children"]))

    # the final page's drop zone is the same door, with the same bounds
    _, final = visitor(front.base, ADDRESSES[2], "/final")
    final.values.setdefault("final-token", {})["value"] = TOKEN
    name, body = zeros_package(zeros_folder, "final-c")
    final.values.setdefault("final-upload", {})["filename"] = [f"team-c-{name}"]
    final.click("final-upload", "contents", [data_url(body)])
    refused = str(final.values["final-uploaded"]["children"])
    assert "Package refused: not stored: the upload store holds 135 MiB" in refused, refused
    peaks.append(held(front.state_dir))

    shared, here = max(p[0] for p in peaks), max(p[1] for p in peaks)
    assert shared <= STORE_MB * MIB and here <= STORE_MB * MIB
    print(f"uploads: 20 posts from one address in {took:.1f} s stored {len(stored)} ({held(front.state_dir)[0] / MIB:.1f}"
          f" MiB after the second address); largest shared store {shared / MIB:.1f} MiB, largest copy here "
          f"{here / MIB:.1f} MiB, bound {STORE_MB} MiB")
    healthy(front.base)


# --------------------------------------------------------------------------- secrets and the broker


def _encodings(secret: bytes) -> list[bytes]:
    """The secret as it would sit in Redis: raw, and inside base64 at each of the three alignments (kombu
    carries a task's body base64-encoded), trimmed to the characters that depend on the secret alone."""
    found = [secret]
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret)
        found.append(encoded[(offset * 4 + 2) // 3 + 1: -4])
    return found


def redis_contents(client: redis.Redis) -> list[bytes]:
    """Every key and value of the database, whatever its type."""
    out: list[bytes] = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "list":
            out += client.lrange(key, 0, -1)
        elif kind == "hash":
            out += [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == "set":
            out += list(client.smembers(key))
        elif kind == "zset":
            out += client.zrange(key, 0, -1)
    return out


def append_only_files(client: redis.Redis) -> list[bytes]:
    folder = Path(client.config_get("dir")["dir"])
    files = sorted(p for p in folder.rglob("*") if p.is_file() and ".aof" in p.name)
    assert files, f"no append-only file in {folder}"
    return [p.read_bytes() for p in files]


def test_a_final_launched_from_the_page_leaves_no_byte_of_the_token_in_redis_or_its_append_only_file(
        tmp_path_factory):
    root = tmp_path_factory.mktemp("final-broker")
    env = dict(WHESTBOARD_ALLOW_UPLOADS="1", WHESTBOARD_ORGANIZER_TOKEN=TOKEN)
    with redis_server(appendonly=True) as url, \
            serve_stack(root / "state", WHESTBOARD_REDIS_URL=url, **env) as server, \
            celery_worker("worker", root / "state", url, concurrency=2, **env):
        client = redis.Redis.from_url(url)
        organizer, page = visitor(server.base, ADDRESSES[0], "/final")
        page.values["final-token"]["value"] = TOKEN
        page.values.setdefault("final-upload", {})["filename"] = ["alpha.py", "beta.py"]
        page.click("final-upload", "contents", [data_url(MEAN.encode())] * 2)
        packages = page.values["final-packages"]["data"]
        assert [line.split("=")[0] for line in packages] == ["alpha", "beta"], page.values["final-uploaded"]
        for field, value in (("final-round", "v1-warmup"), ("final-seed", "20261206"), ("final-n", "2"),
                             ("final-samples", "1000"), ("final-extra", "0")):
            page.values[field]["value"] = value
        finals = "select count(*) from jobs where kind = 'final-done.data'"

        # a hand-made job (the page's store, forged or altered) is refused before it is launched
        forged = Launching(server.base, ADDRESSES[1])
        forged_page = dashclient.PageSession(forged, "/final").load()
        job = {"round": "v1-warmup", "seed": "1", "n": "2", "samples": "1000", "extra": "0", "lines": packages}
        forged_page.click("final-job", "data", dict(job, grant="9999999999." + "0" * 64))
        assert "This final cannot start: this job carries no organizer grant" in (forged.answers[0] or "")
        assert ledger(server.state_dir, finals) == [(0,)]  # nothing launched, nothing recorded

        page.click("final-run")  # the organizer's click: the token is checked, the job carries a grant
        job = page.values["final-job"]["data"]
        assert job and "token" not in job and job["grant"]
        forged_page.click("final-job", "data", dict(job, lines=[packages[0]]))  # the grant of another request
        assert "no organizer grant for what it asks" in (forged.answers[1] or "")
        assert ledger(server.state_dir, finals) == [(1,)]  # the organizer's, and only it

        assert organizer.answers == [None]  # launched, on the Celery worker
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not ledger(
                server.state_dir, "select 1 from jobs where kind = 'final-done.data' and status = 'finished'"):
            time.sleep(2)
        assert ledger(server.state_dir, "select status, reason from jobs where kind = 'final-done.data'") == \
            [("finished", None)]
        contents, aof = redis_contents(client), append_only_files(client)

    # the scan can find what it looks for: the job's own request (lines) sits in Redis, base64 in kombu's body
    sha = packages[0].split("upload:")[1].encode()
    assert any(enc in blob for enc in _encodings(sha) for blob in contents + aof)
    for blob in contents + aof:
        for enc in _encodings(TOKEN.encode()):
            assert enc not in blob, "the organizer token reached Redis"
    print(f"final through Redis: {len(contents)} keys and values and {sum(map(len, aof)):,} bytes of append-only "
          "file scanned, no trace of the token")


# --------------------------------------------------------------------------- cached values are data


class Planted:
    """What someone with write access to Redis plants: a pickle that writes a file when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "planted code ran in the web worker"))


def test_a_pickle_planted_under_every_cache_key_is_never_run_and_the_site_serves_on(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    marker = root / "planted-code-ran"
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        with serve_stack(root / "state", WHESTBOARD_REDIS_URL=url) as server:
            assert requests.get(server.base + "/leaderboard", timeout=60).status_code == 200
            dashclient.PageSession(dashclient.DashClient(server.base, timeout=120), "/convergence").load()
        keys = client.keys(f"{KEY_PREFIX}*")
        regions = sorted({k.decode().split(":")[1] for k in keys})
        assert {"leaderboard-scatter", "convergence-static-figure"} <= set(regions), regions
        for key in keys:
            client.set(key, pickle.dumps(Planted(marker)))

        with serve_stack(root / "state", WHESTBOARD_REDIS_URL=url) as server:  # restarted on the planted values
            board = dashclient.PageSession(dashclient.DashClient(server.base, timeout=120), "/leaderboard").load()
            session = dashclient.PageSession(dashclient.DashClient(server.base, timeout=120), "/convergence").load()
            healthy(server.base)
            log = server.log_text()
        signed = {k.decode().split(":")[1] for k in keys if (client.get(k) or b"").startswith(SIGNED_MAGIC)}
    assert not marker.exists(), "a planted pickle was unpickled"
    assert "graded submissions" in board.values["lb-scatter"]["figure"]["layout"]["title"]["text"]
    assert session.values["convergence-graph"]["figure"]["data"]
    assert "cache.refused" in log
    assert {"leaderboard-scatter", "convergence-static-figure"} <= signed  # read as misses, stored again signed
    print(f"planted pickles under {len(keys)} keys of {len(regions)} regions: none ran, the pages served, "
          f"regions stored again signed: {sorted(signed)}")
