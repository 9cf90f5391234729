"""Looks for secrets: environment variables, the app's files, other processes, the network."""

import os
import socket

from whestbench import BaseEstimator

SECRET_FILE = "{SECRET_FILE}"
DATA_DIR = "{DATA_DIR}"


def attempt(label, action):
    try:
        print(f"{label}: GOT {action()!r}"[:300])
    except Exception as exc:  # noqa: BLE001
        print(f"{label}: blocked ({type(exc).__name__}: {exc})")


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        print("environment:", sorted(os.environ))
        attempt("data dir", lambda: os.listdir(DATA_DIR))
        attempt("parent environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
        attempt("pid 1 environ", lambda: open("/proc/1/environ", "rb").read())
        attempt("/etc/passwd", lambda: open("/etc/passwd").read())
        attempt("home", lambda: os.listdir(os.path.expanduser("~root")))
        attempt("network", lambda: socket.create_connection(("127.0.0.1", 80), timeout=1))
        attempt("kill parent", lambda: os.kill(os.getppid(), 0))
        with open(SECRET_FILE) as handle:  # must raise: the app's files are out of reach
            return handle.read()
