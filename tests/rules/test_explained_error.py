"""A failure whest names before scoring, said once with the advice that applies to the round and the module."""

from __future__ import annotations

from whestboard.rules import error_hint, explained_error, whest_error

MISSING = "ESTIMATOR_MISSING_MODULE"


def _whest(module: str) -> dict:
    """whest's own error for an estimator that imports ``module`` and cannot (its code and message)."""
    return whest_error(ModuleNotFoundError(f"No module named '{module}'", name=module), "run")


def test_numpy_under_phase2_points_to_flopscope_numpy_not_to_helper_modules():
    error = _whest("numpy")
    assert error["code"] == MISSING and "helper modules" in error["message"]  # whest's covers every case
    said = explained_error(error, "v2-phase2")
    assert said["sentence"] == ("`numpy` cannot be imported: under v2-phase2 rules participant code may import only "
                                "the standard library, flopscope and whestbench, as on the grader, which has no numpy.")
    assert said["hint"].startswith("Use flopscope.numpy instead") and "helper" not in said["hint"]


def test_a_module_nothing_provides_is_a_helper_that_did_not_ship():
    said = explained_error(_whest("my_helpers"), "v2-phase2")
    assert said["sentence"].startswith("`my_helpers` cannot be imported: no installed package and no file")
    assert "ship it with estimator.py" in said["hint"]
    assert explained_error(_whest("my_helpers"), "v1-warmup")["hint"] == said["hint"]


def test_other_failures_keep_their_message_and_hint():
    error = {"code": "SETUP_ERROR", "message": "setup() raised ValueError: no"}
    assert explained_error(error, "v2-phase2") == {"code": "SETUP_ERROR", "sentence": error["message"],
                                                   "hint": error_hint("SETUP_ERROR")}
    numpy_v1 = explained_error(_whest("numpy"), "v1-warmup")  # v1 graders had numpy: nothing to say about it
    assert numpy_v1["sentence"] == _whest("numpy")["message"] and numpy_v1["hint"] == error_hint(MISSING)
