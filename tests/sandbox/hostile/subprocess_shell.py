"""Tries to run a shell command through subprocess (fork + exec)."""

import subprocess

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        subprocess.run(["sh", "-c", "echo pwned > /tmp/whestboard-pwned"], check=True)
