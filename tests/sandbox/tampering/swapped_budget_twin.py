"""Honest twin of swapped_budget.py: it looks at the active budget and spends within it, in namespaces."""

import flopscope as flops
import flopscope._budget as budget_state
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        graders = budget_state._thread_local.active_budget
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            with flops.namespace("layer"):
                x = fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        assert budget_state._thread_local.active_budget is graders
        return fnp.stack(rows)
