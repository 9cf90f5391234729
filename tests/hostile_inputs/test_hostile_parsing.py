"""Hostile form input against a real server: each probe is a sentence, in bounded memory, storing nothing.

Found by probing a running server: ``/lab?dataset=v1-warmup&mlps=0:100000000`` then
Run grew a worker past 12 GB for 40 s; a budget of ``2**99999999`` or Monte Carlo
samples of ``1e400`` made Run do nothing (the callback raised). Here one 2-worker
gunicorn server (the image's command line) takes every such probe the way the
browser sends it, a Dash callback replayed by benchmarks/dashclient.py, and each
probe must come back as the parser's message in the page, with no worker's peak
memory 500 MB above where it was, the store's files byte-for-byte unchanged and
the server still serving afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from pathlib import Path

import psutil
import pytest
import requests

from tests.prod_support import gunicorn, load_dashclient
from whestboard.data import served_datasets

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

DATASET = "v1-warmup"
MAX_GROWTH_BYTES = 500 * 2**20
#: Generous: a refusal answers in milliseconds; the memory bomb this guards against took 31-41 s.
CALLBACK_TIMEOUT_S = 30
ESTIMATOR_SOURCE = b"""from whestbench import BaseEstimator
import flopscope.numpy as fnp


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.zeros((mlp.depth, mlp.width), dtype=fnp.float32)
"""


def _served_size() -> int:
    """How many MLPs the embedded split has (0 when it is not served: the server fixture then fails)."""
    served = served_datasets()
    return len(served[DATASET].indices) if DATASET in served else 0


N = _served_size()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = served_datasets()
    if DATASET not in served:
        pytest.fail(f"embedded dataset {DATASET} is not served (is data/{DATASET} baked?)")
    assert served[DATASET].indices == list(range(N))  # the messages below name a contiguous 0..N-1
    with gunicorn("app:server", tmp_path_factory.mktemp("hostile-state"), workers=2, threads=2,
                  ready_path="/healthz", WHESTBOARD_ORGANIZER_TOKEN="organizer-secret-hostile",
                  WHESTBOARD_ALLOW_UPLOADS="1") as running:
        yield running


# --------------------------------------------------------------------------- what each probe is judged on


def store_files(state_dir: Path) -> dict[str, str]:
    """sha256 of every stored file: the SQLite store (and its WAL), uploads, caches; not logs or WAL indexes.

    ``-shm`` is SQLite's shared-memory index, rewritten by readers; it holds no data.
    """
    return {str(p.relative_to(state_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(state_dir.rglob("*"))
            if p.is_file() and not p.name.endswith(("-shm", ".log"))}


def store_rows(state_dir: Path) -> dict[str, list[tuple]]:
    """Every row of the runs and job tables, read through a read-only connection (which cannot checkpoint)."""
    con = sqlite3.connect(f"file:{state_dir / 'whestboard.sqlite'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: sorted(map(repr, con.execute(f'SELECT * FROM "{t}"'))) for t in tables}
    finally:
        con.close()


def worker_pids(server) -> list[int]:
    return sorted(c.pid for c in psutil.Process(server.proc.pid).children())


def _peak_rss_bytes(pid: int) -> int:
    """The kernel's high-water mark of the process's resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


class PeakMemory:
    """Each worker's peak resident memory during a block, above its resident memory before it.

    The kernel's high-water mark is reset on entry (``/proc/PID/clear_refs``), so a
    transient peak that is freed before the answer still counts.
    """

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.growth: dict[int, int] = {}

    def __enter__(self) -> PeakMemory:
        self.before = {}
        for pid in self.pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            self.before[pid] = psutil.Process(pid).memory_info().rss
        return self

    def __exit__(self, *exc) -> None:
        self.growth = {pid: _peak_rss_bytes(pid) - self.before[pid] for pid in self.pids}


def alert_text(component) -> str:
    """The text of an Alert as the callback sent it (children: a string or a list of strings/components)."""
    if component is None:
        return ""
    if isinstance(component, str):
        return component
    if isinstance(component, list):
        return "".join(alert_text(c) for c in component)
    return alert_text(component.get("props", {}).get("children"))


def probe(server, page, button: str, message_at: str) -> tuple[str, PeakMemory, bool]:
    """Click ``button`` on a loaded page; (message shown, peak memory, store unchanged)."""
    files, rows = store_files(server.state_dir), store_rows(server.state_dir)
    refusal = None
    with PeakMemory(worker_pids(server)) as memory:
        try:
            page.click(button, max_seconds=CALLBACK_TIMEOUT_S)
        except dashclient.CallbackFailed as failed:  # a value out of its component's domain: 400, a sentence
            if failed.status != 400:
                raise
            refusal = failed.body
    unchanged = store_files(server.state_dir) == files and store_rows(server.state_dir) == rows
    message = refusal if refusal is not None else alert_text(page.values.get(message_at, {}).get("children"))
    return message, memory, unchanged


def assert_refused(server, message: str, expected: list[str], memory: PeakMemory, unchanged: bool) -> None:
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    assert len(message) < 600, message  # a sentence, never an echo of the input
    assert all(growth < MAX_GROWTH_BYTES for growth in memory.growth.values()), memory.growth
    assert unchanged, "the store changed on a refused request"
    health = requests.get(server.base + "/healthz", timeout=CALLBACK_TIMEOUT_S)
    assert health.status_code == 200 and health.json()["ok"] is True


def client(server):
    return dashclient.DashClient(server.base, keepalive=False, timeout=CALLBACK_TIMEOUT_S)


# --------------------------------------------------------------------------- the lab form


def lab_cases(n: int) -> list:
    """(query string, form values set before Run, what the message must say), for an n-MLP dataset."""
    last = n - 1
    help_text = "write indices such as 0:8, 3 or 0,2,5"
    budget_help = "or a multiple of the round's B (0.5B)"
    mc_help = "write a whole number of samples from 2 to 1e9"
    out_of_domain = "lab-mlps.value = "
    return [
        pytest.param("mlps=0:100000000", {}, [f"MLPs {n}..99999999 are not in this dataset (it has {n} MLPs: "
                                              f"0..{last})", help_text], id="mlps-huge-range"),
        pytest.param("", {"lab-mlps": "0:" + "9" * 40}, [f"MLPs {n}..{'9' * 39}8 are not in this dataset"],
                     id="mlps-40-digit-range"),
        pytest.param("", {"lab-mlps": ",".join(["0"] * 100_000)}, ["characters long", help_text],
                     id="mlps-100k-parts"),
        pytest.param("", {"lab-mlps": ",".join(["0"] * (n + 1))},
                     [f"more than {n} comma-separated parts but the dataset has only {n} MLPs"], id="mlps-parts"),
        pytest.param("", {"lab-mlps": "-1"}, ["'-1' has a negative number", help_text], id="mlps-negative"),
        pytest.param("", {"lab-mlps": "0:8:0"}, ["'0:8:0' has step 0: a step must be 1 or more"], id="mlps-step-0"),
        pytest.param("", {"lab-mlps": "0:8:-2"}, ["'0:8:-2' has a negative number"], id="mlps-step-negative"),
        pytest.param("", {"lab-mlps": "5:3"}, ["MLP range '5:3' selects no MLP"], id="mlps-empty-range"),
        pytest.param("", {"lab-mlps": "1.5"}, ["cannot read MLP selection part '1.5'", help_text],
                     id="mlps-not-integer"),
        # A text box never holds a list or an object: a hand-made request is answered 400, naming the box.
        pytest.param("", {"lab-mlps": list(range(10**5))}, [out_of_domain], id="mlps-json-list"),
        pytest.param("", {"lab-mlps": {"0": 8}}, [out_of_domain], id="mlps-json-object"),
        pytest.param("budget=2**99999999", {}, ["budget per MLP '2**99999999' is more than 1e300 FLOPs",
                                                "1000 x B = 6.8e+13 FLOPs", "write at most 1000B"],
                     id="budget-huge-power"),
        pytest.param("", {"lab-budget": "1e400"}, ["budget per MLP '1e400' is more than 1e300 FLOPs"],
                     id="budget-overflow"),
        pytest.param("", {"lab-budget": "nan"}, ["budget per MLP 'nan' is not a number", budget_help],
                     id="budget-nan"),
        pytest.param("", {"lab-budget": "-5"}, ["budget per MLP '-5' is below 1 FLOP"], id="budget-negative"),
        pytest.param("", {"lab-budget": "0"}, ["budget per MLP '0' is below 1 FLOP"], id="budget-zero"),
        pytest.param("", {"lab-budget": "1001B"}, ["'1001B' is 6.81e+13 FLOPs, above the most a run accepts"],
                     id="budget-above-cap"),
        pytest.param("", {"lab-budget": "9" * 10_000}, ["is too long to be a budget", "(10,000 characters)"],
                     id="budget-long"),
        pytest.param("", {"lab-budget": 1e308}, ["budget per MLP 1e+308 is 1e+308 FLOPs"], id="budget-json-number"),
        pytest.param("estimator=mc&mc=1e400", {}, ["Monte Carlo samples '1e400' is more than 1e300 samples",
                                                   mc_help], id="mc-overflow"),
        pytest.param("estimator=mc", {"lab-mc": "1e30"}, ["Monte Carlo samples '1e30' is 1e+30 samples"],
                     id="mc-huge"),
        pytest.param("estimator=mc", {"lab-mc": "0"}, ["Monte Carlo needs at least 2 samples"], id="mc-zero"),
        pytest.param("estimator=mc", {"lab-mc": "-3"}, ["Monte Carlo samples '-3' is negative"], id="mc-negative"),
        pytest.param("estimator=mc", {"lab-mc": "2.5"}, ["'2.5' is not a whole number of samples"],
                     id="mc-not-integer"),
        pytest.param("estimator=mc", {"lab-mc": "3B"}, ["'3B' asks for 3 of the budget"], id="mc-fraction"),
        pytest.param("", {"lab-estimator": "/etc/hostname.py"}, ["Estimator '/etc/hostname.py' is not in the menu"],
                     id="estimator-file-path"),
    ]


@pytest.mark.parametrize(("query", "values", "expected"), lab_cases(N))
def test_the_lab_refuses_hostile_input_with_a_sentence(server, query, values, expected):
    page = dashclient.PageSession(client(server), f"/lab?dataset={DATASET}&{query}".rstrip("&")).load()
    for component, value in values.items():
        page.values[component]["value"] = value
    message, memory, unchanged = probe(server, page, "lab-run", "lab-form-error")
    assert_refused(server, message, expected, memory, unchanged)
    assert page.values["lab-job"].get("data") is None  # no job was started
    assert "lab-result-panel" not in page.values


# --------------------------------------------------------------------------- the upload form


@pytest.fixture
def upload_page(server):
    """/upload with an estimator accepted, as after a user dropped their file."""
    page = dashclient.PageSession(client(server), f"/upload?dataset={DATASET}").load()
    page.values["upload-file"]["filename"] = "estimator.py"
    encoded = base64.b64encode(ESTIMATOR_SOURCE).decode()
    page.click("upload-file", "contents", f"data:text/x-python;base64,{encoded}")
    assert page.values["upload-sha"]["data"] == hashlib.sha256(ESTIMATOR_SOURCE).hexdigest()
    assert page.values["upload-run"]["disabled"] is False
    return page


@pytest.mark.parametrize(("mlps", "expected"), [
    pytest.param("0:100000000", [f"MLPs {N}..99999999 are not in this dataset (it has {N} MLPs: 0..{N - 1})"],
                 id="huge"),
    pytest.param("-1", ["'-1' has a negative number"], id="negative"),
    pytest.param("0:4:0", ["a step must be 1 or more"], id="step-0"),
    pytest.param(",".join(["0"] * 100_000), ["characters long"], id="100k-parts"),
])
def test_the_upload_form_refuses_a_hostile_selection_before_queueing(server, upload_page, mlps, expected):
    upload_page.values["upload-mlps"]["value"] = mlps
    message, memory, unchanged = probe(server, upload_page, "upload-run", "upload-submit-status")
    assert_refused(server, message, expected, memory, unchanged)
    assert upload_page.values["upload-job"].get("data") is None  # nothing was queued


# --------------------------------------------------------------------------- and the site still works


def test_after_every_probe_the_site_serves_pages_and_runs(server):
    for path in ("/", f"/explorer?dataset={DATASET}", "/leaderboard", f"/convergence?dataset={DATASET}"):
        assert requests.get(server.base + path, timeout=CALLBACK_TIMEOUT_S).status_code == 200, path
    page = dashclient.PageSession(client(server), f"/lab?dataset={DATASET}&mlps=0&estimator=mean").load()
    page.values["lab-fresh"]["value"] = True
    page.click("lab-run", max_seconds=180)
    result = page.values["lab-job-result"]["data"]
    assert result.get("run_id") and not result.get("error"), result
    assert any(result["run_id"] in row for row in store_rows(server.state_dir)["runs"])
    assert len(worker_pids(server)) == 2  # no worker died on the way
    assert "Traceback" not in server.log_text()
