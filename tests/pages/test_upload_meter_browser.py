"""In the browser: an upload that resets flopscope's counter is scored as the grader scores it and flagged on its
result page; its honest twin is not."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page
from tests.pages.test_upload_browser import small_dataset_server, watch_until_finished

TAMPERING = Path(__file__).parents[1] / "sandbox" / "tampering"
__all__ = ["small_dataset_server"]  # the fixture, shared with the other upload tests


def _upload_and_wait(page, path: Path, previous: str | None = None) -> str:
    """Upload ``path``, wait for its own job (not ``previous``, the card shown before) to end; its header."""
    page.goto(page.base_url + "/upload")
    wait_for_dash(page)
    page.set_input_files("#upload-file input[type=file]", str(path))
    page.wait_for_selector("#upload-sha-text")
    page.click("#upload-run")
    for _ in range(240):  # the new job's card replaces the last one's
        header = page.locator("#upload-job-card strong").first
        if header.count() and header.inner_text() != previous:
            break
        page.wait_for_timeout(250)
    seen = watch_until_finished(page)
    assert seen[-1].startswith("Done"), seen
    return page.locator("#upload-job-card strong").first.inner_text()


def test_a_tampering_upload_is_flagged_beside_the_graders_verdict(browser, small_dataset_server, tmp_path):
    for name in ("counter_reset.py", "counter_reset_twin.py"):
        (tmp_path / name.removesuffix(".py")).mkdir()
        shutil.copy(TAMPERING / name, tmp_path / name.removesuffix(".py") / "estimator.py")
    with checked_page(browser, small_dataset_server) as page:
        first = _upload_and_wait(page, tmp_path / "counter_reset" / "estimator.py")
        assert page.locator("#upload-verdicts .verdict-badge").all_inner_texts() == ["ok", "ok", "ok"]
        assert "Meter tampering seen on 3 of 3 MLP(s)" in page.inner_text("#upload-meter-tampering")
        flags = page.locator("#upload-verdicts .meter-tampering").all_inner_texts()
        assert len(flags) == 3 and all("counter was reset or rewritten" in f for f in flags)

        assert _upload_and_wait(page, tmp_path / "counter_reset_twin" / "estimator.py", first) != first
        assert page.locator("#upload-verdicts .verdict-badge").all_inner_texts() == ["ok", "ok", "ok"]
        assert page.locator("#upload-meter-tampering").count() == 0
        assert page.locator("#upload-verdicts .meter-tampering").count() == 0
