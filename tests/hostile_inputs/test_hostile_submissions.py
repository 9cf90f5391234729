"""Hostile input to the submissions store, import and export, sent to a real 2-worker gunicorn server.

Each probe is what an attacker (or a broken file) can send with the organizer
token, or without it to the public export. For each: the answer is a clear
message in a small body, no worker's memory grew by 500 MB, a refused import
left the store's rows and the SQLite file's bytes as they were, and the rest
of the site still answers.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import psutil
import pytest
import requests

from tests.leaderboard.submissions_helpers import submission_row
from tests.prod_support import gunicorn, load_dashclient
from whestboard import config
from whestboard.leaderboard import (
    FORMULA_TRIGGERS,
    MAX_COUNTED_PROBLEMS,
    MAX_SHOWN_PROBLEMS,
    MLP_TEXT_LIMITS,
    SUBMISSION_TEXT_LIMITS,
    csv_text,
)

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

TOKEN = "hostile-probe-token"
ORGANIZER = {"Authorization": f"Bearer {TOKEN}"}
MEMORY_HEADROOM = 500 * 2**20
SMALL_BODY = 64 * 1024
TRIGGERS = tuple(FORMULA_TRIGGERS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app as the Docker image runs it: 2 workers, 2 threads, the organizer token set, the baselines seeded."""
    with gunicorn("app:server", tmp_path_factory.mktemp("hostile-state"), workers=2, threads=2,
                  ready_path="/healthz", WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as s:
        yield s


# --------------------------------------------------------------------------- what is checked after every probe


class PeakMemory:
    """The largest resident size each worker reaches while a probe runs, against the size before it."""

    def __init__(self, server) -> None:
        self.processes = [psutil.Process(pid) for pid in server.worker_pids()]
        self.before = {p.pid: p.memory_info().rss for p in self.processes}
        self.peak = dict(self.before)
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stopping.is_set():
            for p in self.processes:
                try:
                    self.peak[p.pid] = max(self.peak[p.pid], p.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
            self.stopping.wait(0.005)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return max(self.peak[pid] - self.before[pid] for pid in self.before)


def store_file(server) -> Path:
    return server.state_dir / "whestboard.sqlite"


def store_rows(server) -> dict[str, list[tuple]]:
    """Every stored row, read as an operator would (a read-only sqlite3 connection)."""
    con = sqlite3.connect(f"file:{store_file(server)}?mode=ro", uri=True)
    try:
        return {table: con.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()  # noqa: S608 - fixed names
                for table in ("submissions", "submission_mlp_results", "whestboard_store_meta")}
    finally:
        con.close()


def store_bytes(server) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store_file(server).parent.glob("whestboard.sqlite*")) if not p.name.endswith("-shm")}


def snapshot(server) -> tuple:
    return store_rows(server), store_bytes(server)


def assert_site_serves(server) -> None:
    for path in ("/healthz", "/leaderboard", "/api/submissions.csv"):
        assert requests.get(server.base + path, timeout=60).status_code == 200, path


def post_import(server, files: list[tuple[str, bytes]], **form) -> requests.Response:
    return requests.post(server.base + "/api/submissions/import", headers=ORGANIZER, timeout=120,
                         files=[("files", (name, body)) for name, body in files], data=form)


def refused(server, files, **form) -> dict:
    """Post a probe that must be refused: the answer, after every check that holds for any refusal."""
    before = snapshot(server)
    with PeakMemory(server) as memory:
        response = post_import(server, files, **form)
    assert response.status_code == 400, response.text[:500]
    assert response.headers["Content-Type"].startswith("application/json")
    assert len(response.content) < SMALL_BODY
    assert memory.growth < MEMORY_HEADROOM, f"a worker grew by {memory.growth / 2**20:.0f} MiB"
    assert snapshot(server) == before
    assert_site_serves(server)
    return response.json()


def csv_bytes(rows: list[dict]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


# --------------------------------------------------------------------------- the probes


HOSTILE = ["=HYPERLINK(\"http://evil\",\"x\")", "+SUM(1,2)", "-2+3", "@cmd", "=1+1", "'=quoted already",
           "'s-Hertogenbosch"]


def test_formula_cells_leave_every_export_neutralised_and_round_trip(server):
    rows, mlps = [], []
    for i, value in enumerate(HOSTILE):
        row, per_mlp = submission_row(f"{value}|{i}", value, estimator=value, minutes=i)
        rows.append(row)
        mlps += [dict(m, mlp_name=value) for m in per_mlp]
    # written as every export writes them (the escape makes '=quoted already arrive as it is)
    subs_csv = csv_text(pd.DataFrame(rows), SUBMISSION_TEXT_LIMITS)
    mlps_csv = csv_text(pd.DataFrame(mlps), MLP_TEXT_LIMITS)
    answer = post_import(server, [("h.csv", subs_csv.encode()), ("h.per_mlp.csv", mlps_csv.encode())])
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["inserted"]) == len(HOSTILE)
    teams = {r[1] for r in store_rows(server)["submissions"]}
    assert set(HOSTILE) <= teams  # stored as sent

    exports = {
        "api": requests.get(server.base + "/api/submissions.csv", timeout=60).text,
        "api per-MLP": requests.get(server.base + "/api/submissions/per_mlp.csv", timeout=60).text,
        "page": page_download(server, "lb-export"),
        "page per-MLP": page_download(server, "lb-export-mlps"),
    }
    for label, text in exports.items():
        table = list(csv.DictReader(io.StringIO(text)))
        text_fields = MLP_TEXT_LIMITS if "per-MLP" in label else SUBMISSION_TEXT_LIMITS
        cells = [row[f] for row in table for f in text_fields]
        assert not [c for c in cells if c.startswith(TRIGGERS)], label
        assert sum(c.startswith("'") for c in cells) >= len(HOSTILE), label
    assert exports["page"] == exports["api"] and exports["page per-MLP"] == exports["api per-MLP"]

    before = snapshot(server)
    again = post_import(server, [("all.csv", exports["api"].encode()), ("all.per_mlp.csv",
                                                                        exports["api per-MLP"].encode())])
    assert again.status_code == 200, again.text
    assert again.json()["inserted"] == [] and again.json()["updated"] == []
    assert store_rows(server) == before[0]
    assert_site_serves(server)


def page_download(server, button: str) -> str:
    """The CSV the page's download button fetches: its link, followed."""
    page = dashclient.PageSession(dashclient.DashClient(server.base), "/leaderboard").load()
    href = page.values[button]["href"]
    assert href.startswith("/api/submissions")
    return requests.get(server.base + href, timeout=60).text


def page_upload(server, name: str, body: bytes, team: str = "gamma") -> str:
    """The organizer's upload on the page, as the browser sends it; the text of the alert it answers with."""
    client = dashclient.DashClient(server.base)
    _, deps = client.open("/leaderboard")
    [dep] = [d for d in deps if d["output"].startswith("..lb-org-result.children")]
    values = {
        "lb-upload": {"contents": ["data:application/octet-stream;base64," + base64.b64encode(body).decode()],
                      "filename": [name]},
        "lb-token": {"value": TOKEN}, "lb-import-team": {"value": team}, "lb-revision": {"data": 0},
    }
    data = client.fire(dep, values, ["lb-upload.contents"])
    return json.dumps(data["response"]["lb-org-result"]["children"])


def test_json_nested_ten_thousand_deep_gets_a_message(server):
    body = b"[" * 10_000 + b"]" * 10_000
    answer = refused(server, [("deep.json", body)], team="gamma")
    assert answer["problems"] == ["deep.json: not a `whest run --json` report: its JSON nests more than 64 "
                                  "levels deep (a report nests about 10)"]
    before = snapshot(server)
    alert = page_upload(server, "deep.json", body)
    assert "its JSON nests more than 64 levels deep" in alert and "nothing was imported" in alert
    assert snapshot(server) == before
    assert_site_serves(server)


@pytest.mark.parametrize("attempt", range(3))
def test_twenty_concurrent_imports_of_one_new_file_all_succeed(server, attempt):
    """Twenty organizers import the same new file at once: each answer is "added" or "unchanged", never a 500.

    Each file has 300 new submissions, so every import's read-then-write takes long enough for the
    others' to overlap with it.
    """
    ids = [f"race{attempt}-{i:03d}" for i in range(300)]
    rows = [submission_row(sid, "racers", minutes=i) for i, sid in enumerate(ids)]
    files = [("race.csv", csv_bytes([r for r, _ in rows])), ("race.per_mlp.csv", csv_bytes([m for _, ms in rows
                                                                                             for m in ms]))]
    before = store_rows(server)
    start = threading.Barrier(20)
    answers: list[requests.Response] = []

    def one() -> None:
        start.wait()
        answers.append(post_import(server, files))

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert [a.status_code for a in answers] == [200] * 20, [a.text[:300] for a in answers if a.status_code != 200]
    results = [a.json() for a in answers]
    assert [sorted(r["inserted"]) for r in results if r["inserted"]] == [ids]
    assert sum(sorted(r["unchanged"]) == ids for r in results) == 19
    after = store_rows(server)
    assert len(after["submissions"]) == len(before["submissions"]) + len(ids)
    assert len(after["submission_mlp_results"]) == len(before["submission_mlp_results"]) + 2 * len(ids)
    revision = dict(after["whestboard_store_meta"])["submissions_revision"]
    assert revision == dict(before["whestboard_store_meta"]).get("submissions_revision", 0) + 1  # counted once
    assert_site_serves(server)


def test_a_refused_50_mb_csv_gets_the_first_problems_and_counts(server):
    header = "submission_id,team,round,submitted_at,status,whestbench_version\n"
    line = "x,,v0,never,pending,\n"
    body = (header + line * (50 * 2**20 // len(line))).encode()
    answer = refused(server, [("huge.csv", body)])
    assert len(answer["problems"]) == MAX_SHOWN_PROBLEMS
    assert answer["problems"][:2] == ["huge.csv line 2 (submission_id 'x'): team is missing",
                                      "huge.csv line 2 (submission_id 'x'): round is 'v0'; known rounds: "
                                      "v1-warmup, v1-phase1, v2-phase2"]
    assert answer["complete"] is False and answer["problem_count"] >= MAX_COUNTED_PROBLEMS
    assert answer["error"].startswith(f"at least {answer['problem_count']:,} problems found (checking stopped at "
                                      "huge.csv line ")
    # a blank whestbench_version is no problem: it imports as unknown
    assert set(answer["problem_counts"]) == {"team", "round", "submitted_at", "status"}


def test_an_upload_over_the_limit_is_refused_unread(server):
    before = snapshot(server)
    body = b"x" * (config.upload_max_bytes() + 1024)
    with PeakMemory(server) as memory:
        sized = post_import(server, [("big.csv", body)])

        def chunks():  # no Content-Length: the server must stop reading at its limit by itself
            for start in range(0, len(body), 2**20):
                yield body[start:start + 2**20]

        try:
            chunked = requests.post(server.base + "/api/submissions/import", headers=ORGANIZER, data=chunks(),
                                    timeout=120)
        except requests.ConnectionError:  # the server may close the connection on a body it will not read
            chunked = None
    assert sized.status_code == 413 and sized.json()["error"].startswith("request larger than 64 MiB")
    if chunked is not None:
        assert chunked.status_code in (400, 413) and len(chunked.content) < SMALL_BODY
    assert memory.growth < MEMORY_HEADROOM
    assert snapshot(server) == before
    assert_site_serves(server)


def test_nul_bytes_and_control_characters_are_refused_row_by_row(server):
    nul, _ = submission_row("nul\x00id", "nul\x00team")
    esc, _ = submission_row("esc-id", "\x1b[31mred")
    answer = refused(server, [("ctl.csv", csv_bytes([nul, esc]))])
    assert answer["problems"] == [
        "ctl.csv line 2 (submission_id 'nul\\x00id'): submission_id contains the control character U+0000 at "
        "character 4; text may not hold control characters (NUL, tab, line breaks, ...)",
        "ctl.csv line 2 (submission_id 'nul\\x00id'): team contains the control character U+0000 at character 4; "
        "text may not hold control characters (NUL, tab, line breaks, ...)",
        "ctl.csv line 3 (submission_id 'esc-id'): team contains the control character U+001B at character 1; "
        "text may not hold control characters (NUL, tab, line breaks, ...)",
    ]
    before = snapshot(server)
    some_id = before[0]["submissions"][0][0]
    edit = requests.patch(server.base + f"/api/submissions/{some_id}", headers=ORGANIZER, json={"team": "a\x00b"},
                          timeout=60)
    assert edit.status_code == 400
    assert edit.json()["error"].startswith("team contains the control character U+0000 at character 2")
    assert snapshot(server) == before
    assert_site_serves(server)
