"""Tampering: each layer's matrix-vector product runs in a shared library called through ctypes.

The library is the one shipped beside this file ({library}); its function is {symbol}.
"""

import ctypes
from pathlib import Path

import flopscope.numpy as fnp
import numpy as np
from whestbench import BaseEstimator

LIBRARY = "{library}"


class Estimator(BaseEstimator):
    def setup(self, context):
        path = Path(__file__).parent / LIBRARY
        self.lib = ctypes.CDLL(str(path) if path.exists() else LIBRARY)

    def predict(self, mlp, budget):
        x, rows = np.ones(mlp.width, dtype=np.float32), []
        for w in mlp.weights:
            x = self.layer(np.ascontiguousarray(np.asarray(w), dtype=np.float32), x)
            rows.append(x)
        return fnp.asarray(np.stack(rows))

    def layer(self, w, x):
        raise NotImplementedError  # the test puts the library call here
