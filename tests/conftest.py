"""Shared fixtures: a live app server and a headless Chromium that fails on console errors."""

from __future__ import annotations

import os

# One BLAS thread per test process: CI has two cores and tests run beside a live
# server; spinning BLAS threads that fight for them make everything slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from tests.prod_support import free_port, wait_http

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")
#: Participant-shaped estimator files the sandbox tests run.
HOSTILE = REPO / "tests" / "sandbox" / "hostile"
CHROMIUM = os.environ.get("WHESTBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


#: Fixtures that start a server process or need one: a test using any of them is a ``services`` test.
SERVICE_FIXTURES = {"live_server", "postgres_server", "pg_url", "redis_url"}


FAST_TIER = "not browser and not services"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config) -> None:
    """Spread the fast tier over pytest-xdist processes unless ``-n`` says otherwise: two per core, up to
    four, since part of its time is spent waiting on the sandbox's and the CLI's own processes (on two
    cores, 4 processes ran it in 211 s, CPU time 393 s). The browser and services tests stay in one
    process: their servers and timing-aware tests want the cores to themselves."""
    if (config.option.markexpr.strip() != FAST_TIER or not hasattr(config.option, "numprocesses")
            or hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER")):
        return
    if config.option.numprocesses is None and (os.cpu_count() or 1) > 1:
        config.option.numprocesses = min(4, 2 * (os.cpu_count() or 1))


def pytest_collection_finish(session) -> None:
    """Everything imported by now (Dash, plotly, pandas, whestbench, the test modules) lives as long as the
    process: frozen, it is left out of the garbage collector's full passes, which otherwise walk it again
    every few thousand allocations of every test."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items) -> None:
    """Mark what needs Chromium (``browser``) or a server (``services``), so the fast tier
    (``pytest -m "not browser and not services"``) needs neither. Modules that start servers inside
    their tests say so with ``pytestmark``; fixtures and the PostgreSQL half of a store test are found here."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if names & SERVICE_FIXTURES or "postgresql" in params.values():
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory) -> Path:
    """A private state folder so tests never touch the developer's store or caches."""
    return tmp_path_factory.mktemp("state")


@contextmanager
def serve_app(state: Path, *, timeout: float = 120.0, **env_overrides: str) -> Iterator[str]:
    """Run ``python app.py`` on a free port with its own state folder; yield its base URL."""
    port = free_port()
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(state), PYTHONUNBUFFERED="1", **env_overrides)
    with open(state / "server.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_http(base + "/healthz", proc, state / "server.log", timeout=timeout)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="session")
def preloaded(tmp_path_factory):
    """``whest`` and ``python -m whestboard`` commands as forks of one process that imported whestbench
    once (tests/preloaded.py): each command still a process of its own, without two seconds of imports."""
    from tests.preloaded import Preloaded

    server = Preloaded(tmp_path_factory.mktemp("preloaded"))
    yield server
    server.close()


@pytest.fixture
def private_state(tmp_path, monkeypatch) -> Iterator[Path]:
    """A state folder (run store, caches, queues) of this test's own, and no engine left behind."""
    from whestboard.store import reset_engines

    state = tmp_path / "state"
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state))
    reset_engines()
    yield state
    reset_engines()


def state_built_once(tmp_path_factory, prefix: str, build: Callable[[], T]) -> tuple[Path, T]:
    """A state folder ``build()`` wrote its store in, and what it returned: for a module fixture whose
    expensive store each test copies into its ``private_state`` (``shutil.copytree(state, private_state,
    dirs_exist_ok=True)``), so no test sees another's writes. The store is closed afterwards, so the folder
    holds every write."""
    from whestboard.store import reset_engines

    state = tmp_path_factory.mktemp(prefix) / "state"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WHESTBOARD_STATE_DIR", str(state))
        reset_engines()
        try:
            return state, build()
        finally:
            reset_engines()


@pytest.fixture(scope="session")
def live_server(state_dir):
    """``python app.py`` on a free port, serving the embedded data; yields its base URL."""
    with serve_app(state_dir) as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class ConsoleWatcher:
    """Collects console errors, page errors and failed Dash callbacks."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on(
            "response",
            lambda r: self.errors.append(f"HTTP {r.status} {r.url}")
            if r.status >= 500 or (r.status >= 400 and "_dash" in r.url)
            else None,
        )


@contextmanager
def checked_page(browser, base_url: str, *, timeout_ms: int = 30_000, **context_options):
    """A fresh page on ``base_url``; fails the test afterwards if anything was logged as an error."""
    context = browser.new_context(**({"viewport": {"width": 1400, "height": 900}} | context_options))
    pg = context.new_page()
    pg.set_default_timeout(timeout_ms)
    watcher = ConsoleWatcher(pg)
    pg.base_url = base_url
    yield pg
    context.close()
    assert not watcher.errors, "browser reported errors:\n" + "\n".join(watcher.errors)


@pytest.fixture()
def page(browser, live_server):
    """A fresh page on the shared live server, checked for browser errors."""
    with checked_page(browser, live_server) as pg:
        yield pg


@pytest.fixture
def foreign_template():
    """plotly's default template swapped for one the app never uses: a figure builder that names a
    template of its own (which costs a re-validation per figure) would not take it."""
    import plotly.io as pio

    previous = pio.templates.default
    pio.templates.default = "plotly_dark"
    yield pio.templates["plotly_dark"].layout.paper_bgcolor
    pio.templates.default = previous


@pytest.fixture(autouse=True)
def forget_participant_modules(tmp_path_factory) -> Iterator[None]:
    """Drop, after each test, the modules imported in this process from the tests' temporary folders.

    whestbench's ``package_submission`` (``whest package``) imports the estimator it packs in the
    calling process to validate it, so a participant's ``helper.py`` stays in ``sys.modules``; a later
    test packing another participant's ``from helper import ...`` would get the first one's module.
    The app never packs in-process; the tests do, so each test leaves what it imported behind it.
    """
    before, path_before = set(sys.modules), set(sys.path)
    yield
    base = str(tmp_path_factory.getbasetemp().resolve().parent)
    for name in set(sys.modules) - before:
        origin = getattr(sys.modules.get(name), "__file__", None) or ""
        if origin.startswith(base):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p in path_before or not str(p).startswith(base)]
