"""Tampering: the work runs in an ``__array__`` hook that flopscope calls while converting, timed as its overhead."""

import time

import flopscope.numpy as fnp
import numpy as np
from whestbench import BaseEstimator


class Layers:
    def __init__(self, weights):
        self.weights = [np.asarray(w) for w in weights]

    def __array__(self, dtype=None, copy=None):
        started, rows = time.perf_counter(), []
        while time.perf_counter() - started < 0.7:  # as much unmetered numpy as the budget would have bought
            x, rows = np.ones(self.weights[0].shape[0]), []
            for w in self.weights:
                x = np.maximum(w @ x, 0.0) / np.sqrt(np.sum(x * x) / x.shape[0] + 1.0)
                rows.append(x)
        return np.stack(rows).astype(np.float32)


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.add(Layers(mlp.weights), 0.0)
