"""Keep a long-running command alive: restart it whenever it exits unasked.

``python -m server.supervise -- celery -A worker worker ...`` is how every start of the project runs its
Celery worker (``./scripts/serve.sh worker``, the compose file's ``worker`` service, the image). A
worker's main process can die of a bug in a library on a bad day (kombu's late acknowledgement after a
lost Redis connection was one: ``whestboard.jobs._celery``); whatever the cause, nobody must have to
notice and restart it by hand. A container restart policy only acts when the container's first process
exits, and a bare shell command not even then, so the supervisor sits in that first place.

Rules: the command is restarted after each exit that was not asked for, after a pause that doubles from
1 s up to 30 s while it keeps dying young (it resets once a run has lasted a minute); SIGTERM and SIGINT
are passed on to the command, and the supervisor exits with its status once it has stopped. Each exit
and restart is one JSON log line (``supervise.exited``, ``supervise.restart``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from whestboard import logs

FIRST_PAUSE_S = 1.0
LONGEST_PAUSE_S = 30.0
#: A run that lasted this long was healthy: the next death starts the pauses from the first again.
HEALTHY_AFTER_S = 60.0


def next_pause(previous: float, ran_for: float) -> float:
    """How long to wait before the next start, after a run of ``ran_for`` seconds."""
    if ran_for >= HEALTHY_AFTER_S or previous <= 0:
        return FIRST_PAUSE_S
    return min(LONGEST_PAUSE_S, previous * 2)


class Supervisor:
    """Runs ``argv`` until told to stop, restarting it when it exits unasked."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.restarts = 0

    def _forward(self, signum: int, _frame) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        pause = 0.0
        while True:
            started = time.monotonic()
            self.child = subprocess.Popen(self.argv)
            status = self.child.wait()
            ran_for = time.monotonic() - started
            logs.event("supervise.exited", level=logging.INFO if self.stopping else logging.WARNING, what=self.argv[0],
                       status=status, ran_s=round(ran_for, 1), asked=self.stopping)
            if self.stopping:
                return status
            pause = next_pause(pause, ran_for)
            self.restarts += 1
            logs.event("supervise.restart", level=logging.WARNING, what=self.argv[0], after_s=pause, restarts=self.restarts)
            deadline = time.monotonic() + pause
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.stopping:
                return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.supervise",
                                     description="Run a command, restarting it whenever it exits unasked.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to keep running, after --: python -m server.supervise -- celery ...")
    return Supervisor(command).run()


if __name__ == "__main__":
    sys.exit(main())
