"""Tampering: at import, flopscope's charging function is wrapped so every operation bills 0 FLOPs."""

import flopscope._budget as budget_state
import flopscope.numpy as fnp
from whestbench import BaseEstimator

_charge = budget_state.BudgetContext._charge_op


def _free(self, op_name, flop_cost, *args, **kwargs):
    return _charge(self, op_name, 0, *args, **kwargs)


budget_state.BudgetContext._charge_op = _free


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = fnp.ones(mlp.width), []
        for w in mlp.weights:
            x = fnp.maximum(w @ x, 0.0) / fnp.sqrt(fnp.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        return fnp.stack(rows)
