"""Honest twin of ctypes_library.py: the same layers in flopscope; ctypes is imported only to size a C float."""

import ctypes

import flopscope.numpy as fnp
from whestbench import BaseEstimator

FLOAT_BYTES = ctypes.sizeof(ctypes.c_float)


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        assert FLOAT_BYTES == 4
        x, rows = fnp.ones(mlp.width, dtype=fnp.float32), []
        for w in mlp.weights:
            x = fnp.maximum(w @ x, 0.0)
            rows.append(x)
        return fnp.stack(rows)
