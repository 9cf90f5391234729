"""Sleeps far past the wall cap (no CPU used, so a CPU limit alone would never fire)."""

import time

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        time.sleep(3600)
