"""Writes garbage to every file descriptor it can find, hoping to forge the sandbox's answer."""

import os

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        for fd in range(3, 256):
            try:
                os.write(fd, b"\xff\xff\xff\xff" + b"garbage" * 100)
            except OSError:
                pass
        return None
