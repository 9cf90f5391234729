"""How fast the playground answers a new seed, and what it sends, measured in a real browser.

Goals (issue 13): from clicking "new seed" to every plot drawn in under 1.5 s at 256 x 8 with the
default truth sample count; a 1024 x 16 MLP runs as a background job whose progress the page shows;
no response is larger than 2 MB.

Starts ``python app.py`` on a free port with a private state folder (nothing cached), opens
``/playground?width=W&depth=D`` in headless Chromium, clicks "new seed" ``--repeats`` times per shape
and times each click until the URL holds the new seed, every graph of the page is drawn and Dash is
idle. Every Dash response's body is weighed (uncompressed, and as sent). The server's share of a new
seed (truth, every estimator, every figure, the response's JSON) is timed in this process too, so the
browser's drawing and the machine's load can be told apart from the work.

    .venv/bin/python benchmarks/bench_playground.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser_helpers import wait_for_dash  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, serve_app  # noqa: E402

SHAPES = ((8, 4), (64, 8), (256, 8))
JOB_SHAPE = (1024, 16)
TARGET_S = 1.5
PAYLOAD_TARGET_BYTES = 2_000_000
TOUR_SEEN = "localStorage.setItem('whestboard.playground.tour', 'seen')"
ALL_DRAWN = """() => {
  const panel = document.querySelector('#pg-result-panel');
  if (!panel || document.querySelector('[data-dash-is-loading="true"]')) { return false; }
  const graphs = panel.querySelectorAll('.dash-graph');
  return graphs.length > 0 && [...graphs].every(g => g.querySelector('.main-svg'));
}"""


class Weigher:
    """The largest Dash response body seen, uncompressed and as sent over the wire."""

    def __init__(self, page) -> None:
        self.largest, self.largest_sent = 0, 0
        page.on("response", self._weigh)

    def _weigh(self, response) -> None:
        if "_dash-update-component" not in response.url:
            return
        try:
            body = response.body()
        except Exception:  # noqa: BLE001 - a response the page navigated away from
            return
        sent = int(response.headers.get("content-length") or len(body))
        self.largest, self.largest_sent = max(self.largest, len(body)), max(self.largest_sent, sent)


def time_new_seed(page, base: str, width: int, depth: int, repeats: int) -> list[float]:
    page.goto(f"{base}/playground?width={width}&depth={depth}&seed=1")
    page.wait_for_function(ALL_DRAWN, timeout=120_000)
    wait_for_dash(page)
    times = []
    for _ in range(repeats):
        before = page.input_value("#pg-seed")
        started = time.perf_counter()
        page.click("#pg-new-seed")
        page.wait_for_function(f"() => new URLSearchParams(location.search).get('seed') !== '{before}'",
                               timeout=120_000)
        page.wait_for_function(ALL_DRAWN, timeout=120_000)
        times.append(time.perf_counter() - started)
        wait_for_dash(page)
    return times


def run_job(page, base: str, width: int, depth: int) -> tuple[float, list[str]]:
    """Open a large shape: the job's wall time to every plot drawn, and the progress texts shown."""
    started = time.perf_counter()
    page.goto(f"{base}/playground?width={width}&depth={depth}&seed=2")
    page.wait_for_selector("#pg-job", state="visible", timeout=60_000)
    seen: list[str] = []
    while not page.evaluate(ALL_DRAWN):
        text = page.inner_text("#pg-job-status") if page.locator("#pg-job-status").count() else ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        page.wait_for_timeout(100)
        if time.perf_counter() - started > 900:
            raise TimeoutError("the 1024 x 16 job did not finish in 15 minutes")
    return time.perf_counter() - started, seen


def server_share(width: int, depth: int, repeats: int) -> list[float]:
    """Seconds of one new seed's server work, in this process: what the ``_plan`` callback does."""
    import json

    import plotly

    from pages import playground

    times = []
    for seed in range(1000, 1000 + repeats):
        started = time.perf_counter()
        params = playground._params(width, depth, str(seed), "auto", None, "auto", [])
        shape, n, specs, rulebook = playground._inputs(params)
        rendered = playground._render(playground.play(shape, n, specs, rulebook))
        json.dumps(rendered.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import os

    from playwright.sync_api import sync_playwright

    os.environ["WHESTBOARD_STATE_DIR"] = tempfile.mkdtemp(prefix="bench-playground-")
    import app

    app.the_app()  # registers the pages, as the server does
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'shape':>9}  server share of a new seed (s), in this process   median")
    for width, depth in SHAPES:
        times = server_share(width, depth, args.repeats)
        print(f"{width:>4} x {depth:<3} " + "  ".join(f"{t:6.3f}" for t in times) + f"   {statistics.median(times):6.3f}")

    with tempfile.TemporaryDirectory() as state, serve_app(Path(state)) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.add_init_script(TOUR_SEEN)
        page = context.new_page()
        page.set_default_timeout(120_000)
        weigher = Weigher(page)
        print(f"{'shape':>9}  new seed -> every plot drawn (s), {args.repeats} seeds   median")
        medians = {}
        for width, depth in SHAPES:
            times = time_new_seed(page, base, width, depth, args.repeats)
            medians[(width, depth)] = statistics.median(times)
            print(f"{width:>4} x {depth:<3} " + "  ".join(f"{t:6.3f}" for t in times)
                  + f"   {medians[(width, depth)]:6.3f}")
        job_s, progress = run_job(page, base, *JOB_SHAPE)
        print(f"{JOB_SHAPE[0]} x {JOB_SHAPE[1]} background job: {job_s:.1f} s to every plot drawn; "
              f"{len(progress)} progress texts shown, e.g. {progress[:3]} ... {progress[-1:]}")
        print(f"largest Dash response: {weigher.largest / 1e6:.3f} MB uncompressed, "
              f"{weigher.largest_sent / 1e6:.3f} MB as sent (target < {PAYLOAD_TARGET_BYTES / 1e6:g} MB)")
        goal = medians[(256, 8)]
        print(f"256 x 8 new seed: {goal:.3f} s, {goal / TARGET_S:.2f} of the {TARGET_S} s goal "
              f"({'met' if goal < TARGET_S else 'missed'}); 256 x 8 / 8 x 4 = {goal / medians[(8, 4)]:.2f}x")
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
