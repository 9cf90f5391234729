"""The supervisor that keeps the Celery worker alive (server/supervise.py), on real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from server import supervise
from tests.prod_support import REPO


def test_the_pause_doubles_while_the_command_dies_young_and_resets_after_a_healthy_run():
    pause, seen = 0.0, []
    for _ in range(7):
        pause = supervise.next_pause(pause, ran_for=0.5)
        seen.append(pause)
    assert seen == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert supervise.next_pause(30.0, ran_for=supervise.HEALTHY_AFTER_S) == supervise.FIRST_PAUSE_S


def test_no_command_is_a_usage_error_that_says_what_to_write(capsys):
    with pytest.raises(SystemExit) as done:
        supervise.main(["--"])
    assert done.value.code == 2
    assert "after --" in capsys.readouterr().err


def test_a_command_that_dies_is_started_again_and_a_sigterm_stops_both(tmp_path):
    """The command crashes on its first two runs and then stays up; SIGTERM reaches it and ends both."""
    runs = tmp_path / "runs"
    child = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        runs = Path({str(runs)!r})
        n = len(runs.read_text().split()) if runs.exists() else 0
        runs.write_text((runs.read_text() if runs.exists() else "") + f"{{os.getpid()}} ")
        if n < 2:
            os.kill(os.getpid(), signal.SIGKILL)  # the way a worker's main process dies
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(0.1)
    """)
    proc = subprocess.Popen([sys.executable, "-m", "server.supervise", "--", sys.executable, "-c", child],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while not (runs.exists() and len(runs.read_text().split()) == 3):
            assert proc.poll() is None and time.time() < deadline, "the supervisor did not restart it"
            time.sleep(0.1)
        time.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read()
    assert log.count('"event": "supervise.restart"') == 2 and '"asked": true' in log, log[-2000:]


def test_every_documented_way_of_starting_a_worker_runs_it_supervised():
    """The compose file's worker service and the image start ``./scripts/serve.sh worker``, which execs the
    supervisor around ``celery -A worker worker``."""
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert services["worker"]["command"] == ["./scripts/serve.sh", "worker"]
    assert services["worker"]["restart"] == "unless-stopped"  # and the container itself comes back too
    serve = (REPO / "scripts" / "serve.sh").read_text()
    worker_mode = serve[serve.index('if [ "${1:-}" = worker ]'):serve.index("fi\n", serve.index('= worker ]'))]
    assert '-m server.supervise -- "$CELERY" -A worker worker' in worker_mode
    assert "./scripts/serve.sh worker" in (REPO / "Dockerfile").read_text()
