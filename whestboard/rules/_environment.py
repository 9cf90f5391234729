"""What the grader's own Python offers participant code, per round: which modules it may import.

The Phase 2 grader runs participant code with the standard library, flopscope and the whestbench API
only: ``import numpy`` raises ``ModuleNotFoundError`` there, and compiled code and subprocesses are
prohibited. The v1 rounds were graded with the participant's usual scientific stack, numpy included.
A run restores the rule of the round it is scored under, as it restores that round's budget and caps;
the sandbox worker applies it (:mod:`whestboard.sandbox._imports`) to imports made *by the
participant's files*, so flopscope and whestbench keep their own numpy.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

#: Besides the standard library, what the Phase 2 grader provides to participant code.
GRADER_PACKAGES = ("flopscope", "whestbench")


@dataclass(frozen=True)
class GraderEnvironment:
    """One round's rule for participant imports, with the sentence a report shows."""

    round_tag: str
    restricted: bool
    allowed_packages: tuple[str, ...] = GRADER_PACKAGES
    compiled_code_allowed: bool = True
    rule: str = ""

    def may_import(self, top_level: str) -> bool:
        """Whether a top-level module that the submission does not ship itself is available."""
        if not self.restricted:
            return True
        return top_level in sys.stdlib_module_names or top_level in self.allowed_packages

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> GraderEnvironment:
        return cls(round_tag=str(data["round_tag"]), restricted=bool(data["restricted"]),
                   allowed_packages=tuple(data.get("allowed_packages") or GRADER_PACKAGES),
                   compiled_code_allowed=bool(data.get("compiled_code_allowed", True)), rule=str(data.get("rule", "")))


PHASE2_RULE = ("Phase 2 grader: participant code may import only the standard library, flopscope and "
               "whestbench (no numpy); compiled code and subprocesses are prohibited")
V1_RULE = "v1 grader: numpy and the participant's usual packages were available"


def environment_for(round_tag: str) -> GraderEnvironment:
    """The grader environment of ``round_tag``: v1 rounds allow numpy, later rounds are Phase 2's."""
    if round_tag.startswith("v1-"):
        return GraderEnvironment(round_tag=round_tag, restricted=False, rule=f"{round_tag}: {V1_RULE}")
    return GraderEnvironment(round_tag=round_tag, restricted=True, compiled_code_allowed=False,
                             rule=f"{round_tag}: {PHASE2_RULE}")
