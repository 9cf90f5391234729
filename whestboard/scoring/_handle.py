"""What a run needs of an estimator: a label, a kind, the hash of its code and a way to make one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EstimatorHandle:
    """Everything a run needs to know about an estimator, without running it.

    ``factory`` returns a fresh object with ``predict(mlp, budget)``; it may also
    have ``setup(context)``, ``teardown()``, ``close()``, ``last_predict_stats()``
    and ``enforces_wall_time_limit`` — ``whestbench.scoring.evaluate_estimator``
    honours the last two, which is how an out-of-process runner reports its own
    metering.
    """

    label: str
    kind: str
    code_sha256: str
    factory: Callable[[], Any] = field(compare=False, repr=False)
    description: str = ""
    class_name: str = ""
    submission_dir: str | None = None

    def describe(self) -> dict:
        """Plain-dict identity, as stored with every run."""
        return {
            "label": self.label,
            "kind": self.kind,
            "code_sha256": self.code_sha256,
            "class_name": self.class_name,
            "description": self.description,
        }
