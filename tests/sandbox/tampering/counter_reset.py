"""Tampering: honest layer-by-layer work, then the active budget's counter is zeroed before returning."""

import flopscope._budget as budget_state
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            x = fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        budget_state.get_active_budget()._flops_used = 0
        return fnp.stack(rows)
