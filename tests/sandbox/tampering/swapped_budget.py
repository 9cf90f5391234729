"""Tampering: predict makes its own huge budget the active one for its work, then puts the grader's back."""

import flopscope as flops
import flopscope._budget as budget_state
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        graders = budget_state._thread_local.active_budget
        budget_state._thread_local.active_budget = flops.BudgetContext(flop_budget=10**15, quiet=True)
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            x = fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        budget_state._thread_local.active_budget = graders
        return fnp.stack(rows)
