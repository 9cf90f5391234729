"""Bytes on the wire for a first and a second visit of every page, with compression off and on.

Starts the Docker image's command (``gunicorn -c gunicorn.conf.py app:server``) twice in one run,
``WHESTBOARD_COMPRESS=0`` then ``1``, each on a private state folder, and opens every page in
headless Chromium with a cold cache (a fresh browser context per page). Bytes are what Chromium's
network layer reports as received for each request (``Network.loadingFinished.encodedDataLength``:
headers plus the body as sent, compressed or not), until the page's callbacks are done. A second
visit of the same page in the same context shows what the browser cache saves: scripts that came
back over the network again are listed.

    .venv/bin/python benchmarks/bench_wire.py [--pages /,/leaderboard] [--detail] [--chromium /usr/bin/chromium]

Every page the app registers is visited (``PAGES`` gives the address each is opened at; a registered
page missing from it is an error). Prints a table per setting, the ratio compressed / uncompressed per
page and, with ``--detail``, every response over 5 kB of each cold compressed visit. Targets (issue 25):
every page <= 1.0 MB cold compressed, no script downloaded again on the second visit, and plotly.py's
full plotly.js (``package_data/plotly.min.js``) never requested: graphs load the app's bundle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PAGES = ("/", "/explorer?dataset=v2-phase2", "/mlp/v2-phase2/0", "/lab", "/convergence?round=v2-phase2",
         "/leaderboard?round=v2-phase2", "/upload", "/compare", "/playground", "/final", "/404")
COLD_TARGET = 1_000_000
FULL_PLOTLY = "/plotly/package_data/plotly.min.js"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(compress: bool):
    """The image's command on a free port with a private state folder."""
    port = _free_port()
    state = Path(tempfile.mkdtemp(prefix="wb-wire-"))
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(state), WHESTBOARD_PORT=str(port), WHESTBOARD_WORKERS="2",
               WHESTBOARD_THREADS="4", WHESTBOARD_HOST="127.0.0.1", WHESTBOARD_COMPRESS="1" if compress else "0")
    gunicorn = Path(sys.executable).parent / "gunicorn"
    with open(state / "server.log", "w") as log:
        proc = subprocess.Popen([str(gunicorn), "-c", "gunicorn.conf.py", "app:server"], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if requests.get(base + "/healthz", timeout=3).status_code < 500:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"server did not start:\n{(state / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield base
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


class WireMeter:
    """Per-request bytes received and whether a response came from the browser's cache."""

    def __init__(self, context, page) -> None:
        self.cdp = context.new_cdp_session(page)
        self.cdp.send("Network.enable")
        self.urls: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.bytes: dict[str, int] = {}
        self.cdp.on("Network.requestWillBeSent", self._sent)
        self.cdp.on("Network.responseReceived", self._received)
        self.cdp.on("Network.loadingFinished", self._finished)

    def _sent(self, event) -> None:
        self.urls[event["requestId"]] = event["request"]["url"]

    def _received(self, event) -> None:
        self.types[event["requestId"]] = event.get("type", "")

    def _finished(self, event) -> None:
        self.bytes[event["requestId"]] = int(event.get("encodedDataLength", 0))

    def reset(self) -> None:
        self.urls.clear()
        self.types.clear()
        self.bytes.clear()

    def total(self) -> int:
        return sum(self.bytes.values())

    def largest(self, base: str, over: int = 5000) -> list[tuple[int, str]]:
        return sorted(((n, self.urls.get(rid, rid).removeprefix(base)) for rid, n in self.bytes.items() if n > over),
                      reverse=True)

    def full_plotly_requests(self) -> list[str]:
        return [u for u in self.urls.values() if FULL_PLOTLY in u]

    def scripts_over_network(self) -> list[str]:
        """Scripts whose body crossed the network (a cache hit or a 304 carries no body)."""
        return [self.urls.get(rid, rid) for rid, n in self.bytes.items()
                if self.types.get(rid) == "Script" and n > 2000]


def visit(page, base: str, path: str) -> None:
    page.goto(base + path, wait_until="networkidle", timeout=120_000)
    page.wait_for_selector("#_pages_content", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-dash-is-loading=\"true\"]')", timeout=60_000)
    page.wait_for_load_state("networkidle", timeout=60_000)


class Visit:
    """One page: cold bytes, second-visit bytes, scripts fetched again, the largest cold responses."""

    def __init__(self, cold: int, warm: int, again: list[str], largest: list[tuple[int, str]],
                 full_plotly: list[str]) -> None:
        self.cold, self.warm, self.again, self.largest, self.full_plotly = cold, warm, again, largest, full_plotly


def measure(browser, base: str, paths: list[str]) -> dict[str, Visit]:
    out = {}
    for path in paths:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        meter = WireMeter(context, page)
        visit(page, base, path)
        cold, largest, full_plotly = meter.total(), meter.largest(base), meter.full_plotly_requests()
        meter.reset()
        visit(page, base, path)
        full_plotly += meter.full_plotly_requests()
        out[path] = Visit(cold, meter.total(), meter.scripts_over_network(), largest, full_plotly)
        context.close()
    return out


_REGISTERED = r"""
import json, dash, app
app.app
print(json.dumps(sorted(p["path_template"] or p["path"] for p in dash.page_registry.values())))
"""


def unvisited_pages(paths: list[str]) -> list[str]:
    """Registered pages (path templates filled by any value) that none of ``paths`` opens."""
    import json
    import re

    state = tempfile.mkdtemp(prefix="wb-wire-pages-")
    done = subprocess.run([sys.executable, "-c", _REGISTERED], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, WHESTBOARD_STATE_DIR=state), timeout=300, check=True)
    registered = json.loads(done.stdout.strip().splitlines()[-1])
    opened = [p.split("?", 1)[0] for p in paths]
    return [r for r in registered
            if not any(re.fullmatch(re.sub(r"<[^>]+>", "[^/]+", r), o) for o in opened)]


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", default=",".join(PAGES))
    parser.add_argument("--detail", action="store_true", help="list each cold page's responses over 5 kB")
    parser.add_argument("--chromium", default=os.environ.get("WHESTBOARD_CHROMIUM", "/usr/bin/chromium"))
    args = parser.parse_args()
    paths = [p for p in args.pages.split(",") if p]
    missing = unvisited_pages(paths) if args.pages == ",".join(PAGES) else []
    if missing:
        raise SystemExit(f"registered pages this benchmark does not open: {missing}; add them to PAGES")
    from playwright.sync_api import sync_playwright

    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        for compress in (False, True):
            with server(compress) as base:
                results[compress] = measure(browser, base, paths)
        browser.close()
    print(f"{'page':34} {'cold, plain':>12} {'cold, compressed':>17} {'ratio':>6} {'2nd visit':>10}  scripts again")
    worst, full_plotly = 0, []
    for path in paths:
        plain, packed = results[False][path], results[True][path]
        worst = max(worst, packed.cold)
        full_plotly += plain.full_plotly + packed.full_plotly
        again = ", ".join(u.rsplit("/", 1)[-1] for u in packed.again) or "none"
        print(f"{path:34} {_mb(plain.cold):>12} {_mb(packed.cold):>17} {packed.cold / plain.cold:>6.3f} "
              f"{_mb(packed.warm):>10}  {again}")
    if args.detail:
        for path in paths:
            print(f"\n{path} cold, compressed: {_mb(results[True][path].cold)}")
            for n, url in results[True][path].largest:
                print(f"  {n:>9,}  {url[:110]}")
    over = [p for p in paths if results[True][p].cold > COLD_TARGET]
    print(f"largest cold page compressed: {_mb(worst)} (target {_mb(COLD_TARGET)}): "
          + ("target met" if not over else f"target MISSED by {', '.join(over)}"))
    print("plotly.py's full plotly.js requested: " + (", ".join(sorted(set(full_plotly))) or "never"))
    return 0 if not over and not full_plotly else 1


if __name__ == "__main__":
    raise SystemExit(main())
