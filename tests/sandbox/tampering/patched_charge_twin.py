"""Honest twin of patched_charge.py: it wraps and patches functions too, but only its own (a memo on its helper)."""

import functools

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Helpers:
    @staticmethod
    def layer(w, x):
        return fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / x.shape[0] + 1.0)


_layer = Helpers.layer
Helpers.layer = staticmethod(functools.wraps(_layer)(lambda w, x: _layer(w, x)))


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            x = Helpers.layer(w, x)
            rows.append(x)
        return fnp.stack(rows)
