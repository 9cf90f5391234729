"""Each round's grader environment: what participant code may import there."""

from __future__ import annotations

from whestboard.rules._environment import GraderEnvironment, environment_for
from whestboard.rules._rounds import ALL_ROUNDS


def test_v1_graders_had_numpy_and_phase2_has_only_the_stdlib_flopscope_and_whestbench():
    for tag in ALL_ROUNDS:
        env = environment_for(tag)
        assert env.round_tag == tag and env.rule.startswith(tag)
        assert env.restricted is (not tag.startswith("v1-"))
    phase2 = environment_for("v2-phase2")
    assert [m for m in ("json", "math", "flopscope", "whestbench", "numpy", "scipy", "torch")
            if phase2.may_import(m)] == ["json", "math", "flopscope", "whestbench"]
    assert not phase2.compiled_code_allowed and "no numpy" in phase2.rule
    assert environment_for("v1-warmup").may_import("numpy")


def test_the_rule_travels_to_the_worker_and_back_unchanged():
    env = environment_for("v2-phase2")
    assert GraderEnvironment.from_dict(env.as_dict()) == env
