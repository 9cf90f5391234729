"""Honest twin of hidden_work.py: an object with ``__array__`` too, but the work is done in flopscope first."""

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Layers:
    def __init__(self, stacked):
        self.stacked = stacked

    def __array__(self, dtype=None, copy=None):
        return self.stacked


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            x = fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        return fnp.add(Layers(fnp.stack(rows)), 0.0)
