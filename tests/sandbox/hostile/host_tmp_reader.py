"""Looks for another user's file in /tmp: the host's /tmp must not even be visible."""

import os

from whestbench import BaseEstimator

HOST_FILE = "{HOST_FILE}"


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        try:
            print("listing:", sorted(os.listdir(os.path.dirname(HOST_FILE))))
        except OSError as exc:
            print(f"listing: blocked ({type(exc).__name__}: {exc})")
        print("stat:", "found" if os.path.lexists(HOST_FILE) else "absent")
        with open(HOST_FILE) as handle:  # must raise: there is no such file in the sandbox's world
            return handle.read()
