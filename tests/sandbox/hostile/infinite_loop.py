"""Spins forever in pure Python: no flopscope op ever runs, so only the parent's hard stop ends it."""

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        n = 0
        while True:
            n += 1
