"""Warming a process loads what jobs forked from it would otherwise each load again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from server import warm
from tests.prod_support import REPO


def test_a_warmed_process_has_references_versions_and_lazy_modules_loaded():
    script = textwrap.dedent("""
        import sys
        from server import warm
        from whestboard.data import served_datasets
        from whestboard.rules import library_versions
        from whestboard.scoring._estimators import _builtin_handle  # the built-ins' memo: private, so peeked at
        assert "flopscope.stats" not in sys.modules
        warm.warm_process()
        assert all(name in sys.modules for name in warm.LAZY_MODULES)
        assert library_versions.cache_info().currsize == 1
        assert _builtin_handle.cache_info().currsize == 3
        served = served_datasets()
        assert served and all("_truth" in ds.__dict__ for ds in served.values())
        print("warm", len(served))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("warm ")


def test_warming_never_raises_and_reports_what_failed(monkeypatch):
    def unreadable():
        raise OSError("disk gone")

    reported = []
    monkeypatch.setattr(warm, "served_datasets", unreadable)
    monkeypatch.setattr(warm.logs, "error", lambda name, exc, **_: reported.append((name, str(exc))))
    warm.warm_process()  # a cold cache only makes the first request slower: no exception escapes
    assert reported == [("warm.failed", "disk gone")]
