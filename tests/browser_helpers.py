"""Helpers for browser tests: wait until Dash has no callbacks in flight."""

from __future__ import annotations


def wait_for_dash(page, timeout: float = 30_000) -> None:
    """Wait until the Dash renderer is idle (no pending callbacks, nothing loading)."""
    page.wait_for_selector("#_pages_content", timeout=timeout)
    page.wait_for_function(
        "() => !document.querySelector('[data-dash-is-loading=\"true\"]')", timeout=timeout
    )
    page.wait_for_load_state("networkidle", timeout=timeout)
