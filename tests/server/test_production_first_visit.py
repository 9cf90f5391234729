"""A freshly started multi-worker server serves every asset and every page to its very first visitors.

Dash registers the libraries a process may serve during its first request; a worker that had not
finished that answered 500 to script requests arriving meanwhile, and the first visitor saw a blank
page. Here nothing is rendered before the burst: the readiness probe is ``/healthz``, the script URLs
come from an app built in another process, and the burst and the visitors arrive at once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.prod_support import (
    REPO,
    VENV_BIN,
    base_env,
    free_port,
    gunicorn,
    stop_process,
    wait_http,
    wait_workers,
)

pytestmark = [pytest.mark.slow, pytest.mark.services]

#: Builds the app in a throwaway process and prints every servable asset URL and every page path.
_CATALOGUE = r"""
import json, os, re, sys, dash, app
server = app.server
client = server.test_client()
index = client.get("/").get_data(as_text=True)
scripts = re.findall(r'src="(/_dash-component-suites/[^"]+)"', index)
# Dash also registers source maps it does not ship (dcc/async-mathjax.js.map): only files that exist
registered = [f"/_dash-component-suites/{ns}/{path}" for ns, paths in app.app.registered_paths.items()
              for path in sorted(paths)
              if os.path.isfile(os.path.join(os.path.dirname(sys.modules[ns].__file__), path))]
pages = sorted({p["path"] for p in dash.page_registry.values() if "<" not in p["path"]})
print(json.dumps({"scripts": scripts, "registered": registered, "pages": pages}))
"""

#: Pages whose path has parameters, opened with a real MLP of the embedded data.
PARAMETRISED_PAGES = ["/mlp/v1-warmup/0"]


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> dict:
    state = tmp_path_factory.mktemp("catalogue-state")
    done = subprocess.run([sys.executable, "-c", _CATALOGUE], cwd=REPO, env=base_env(state), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["scripts"]) >= 5 and len(found["registered"]) > len(found["scripts"])
    return found


@contextmanager
def plain_gunicorn(state_dir: Path, workers: int):
    """``gunicorn app:server -w N``: the command Dash documents, without the project's config file."""
    port = free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    env = base_env(state_dir)
    log = state_dir / f"plain-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(VENV_BIN / "gunicorn"), "app:server", "-w", str(workers), "--threads", "4",
                                 "-b", f"127.0.0.1:{port}"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", proc, log)
        wait_workers(proc, workers, log)
        yield base
    finally:
        stop_process(proc)


def _burst(base: str, urls: list[str], times: int) -> Counter:
    """Every URL ``times`` times, all at once."""
    session_urls = [base + u for u in urls] * times
    with ThreadPoolExecutor(max_workers=32) as pool:
        return Counter(pool.map(lambda u: requests.get(u, timeout=120).status_code, session_urls))


def _assert_every_asset_served(base: str, catalogue: dict) -> None:
    codes = _burst(base, catalogue["scripts"] + catalogue["registered"], times=8)
    assert set(codes) == {200}, f"responses by status: {dict(codes)}"


def test_a_fresh_four_worker_server_serves_every_asset_to_a_concurrent_burst(tmp_path, catalogue):
    with gunicorn("app:server", tmp_path / "state", workers=4, threads=4, ready_path="/healthz") as srv:
        _assert_every_asset_served(srv.base, catalogue)
        assert "DependencyException" not in srv.log_text()


def test_plain_gunicorn_without_the_config_file_serves_every_asset_at_once(tmp_path, catalogue):
    with plain_gunicorn(tmp_path / "state", workers=2) as base:
        _assert_every_asset_served(base, catalogue)


async def _visit_every_page(browser, base: str, paths: list[str]) -> list[str]:
    """One first-time visitor: a fresh context, every page in turn; returns what went wrong."""
    problems: list[str] = []
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await context.new_page()
    page.on("console", lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 500 else None)
    for path in paths:
        await page.goto(base + path, timeout=180_000)
        await page.wait_for_selector("#_pages_content > *", timeout=180_000)
        await page.wait_for_function("() => !document.querySelector('[data-dash-is-loading=\"true\"]')",
                                     timeout=180_000)
        await page.wait_for_load_state("networkidle", timeout=180_000)
    await context.close()
    return problems


async def _visitors(base: str, paths: list[str], n: int) -> list[str]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            results = await asyncio.gather(*(_visit_every_page(browser, base, paths) for _ in range(n)))
        finally:
            await browser.close()
    return [p for r in results for p in r]


@pytest.mark.browser
def test_four_first_time_visitors_at_once_see_every_page_without_an_error(catalogue):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (./scripts/test.sh does)")
    paths = catalogue["pages"] + PARAMETRISED_PAGES
    with tempfile.TemporaryDirectory() as state, gunicorn("app:server", Path(state), workers=4, threads=4,
                                                          ready_path="/healthz") as srv:
        # in a thread of its own: a sync Playwright started earlier in the session holds this thread's loop
        with ThreadPoolExecutor(max_workers=1) as pool:
            problems = pool.submit(asyncio.run, _visitors(srv.base, paths, n=4)).result()
        assert not problems, "first visitors saw errors:\n" + "\n".join(problems[:40])
        assert "DependencyException" not in srv.log_text()
