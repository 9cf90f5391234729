"""Asks for one product costing more FLOPs than any round's budget (2^20 x 2 times 2 x 2^20).

flopscope prices an operation before running it, so this fails at once with
BudgetExhaustedError instead of allocating the 4 TiB result.
"""

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        tall = fnp.ones((1 << 20, 2), dtype=fnp.float32)
        wide = fnp.ones((2, 1 << 20), dtype=fnp.float32)
        return (tall @ wide)[: mlp.depth, : mlp.width]
