"""The meter's integrity: each way of making flopscope count less is named per MLP; honest code is not flagged.

Every estimator in ``tests/sandbox/tampering/`` attacks the meter one way and has an honest twin that
does the same work (and touches the same things a careless check would mistake for tampering: reading
the active budget, patching its own functions, aliasing flopscope.numpy as ``np``, importing ctypes).
Each runs in the real sandbox through ``whestbench.scoring.evaluate_estimator``, as a run scores it.
The grader's verdict is checked unchanged: the tamperer's MLPs keep the score the grader gives them.
Honest references: whestbench's own baselines, the estimator ``whest init`` writes, and every hostile
estimator that returns a prediction.
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from whestbench.scoring import ContestSpec, evaluate_estimator, make_contest
from whestbench.sdk import SetupContext

from whestboard.rules import environment_for
from whestboard.sandbox import _host
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles

TAMPERING = Path(__file__).parent / "tampering"
HOSTILE = Path(__file__).parent / "hostile"
V1 = SandboxLimits(memory_mb=1024, wall_time_limit_s=10.0, residual_wall_time_limit_s=None, grace_s=2.0,
                   setup_timeout_s=5.0, environment=environment_for("v1-warmup"))
V2 = SandboxLimits(memory_mb=1024, wall_time_limit_s=10.0, residual_wall_time_limit_s=None, grace_s=2.0,
                   setup_timeout_s=5.0, environment=environment_for("v2-phase2"))
C_SOURCE = """
void relu_matvec(const float *w, const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) {
        float s = 0.0f;
        for (int j = 0; j < n; j++) s += w[i * n + j] * x[j];
        y[i] = s > 0.0f ? s : 0.0f;
    }
}
"""
SHIPPED_BODY = """f = ctypes.POINTER(ctypes.c_float)
        y = np.empty_like(x)
        self.lib.relu_matvec(w.ctypes.data_as(f), x.ctypes.data_as(f), y.ctypes.data_as(f), ctypes.c_int(x.shape[0]))
        return y"""
LIBM_BODY = """self.lib.exp.restype, self.lib.exp.argtypes = ctypes.c_double, [ctypes.c_double]
        return np.array([self.lib.exp(0.0) * v for v in np.maximum(w @ x, 0.0)], dtype=np.float32)"""


@pytest.fixture(scope="module")
def contest():
    """Two small MLPs with Monte Carlo targets, made by whestbench itself."""
    spec = ContestSpec(width=16, depth=3, n_mlps=2, flop_budget=10**8, ground_truth_samples=2000, seed=23,
                       wall_time_limit_s=10.0, residual_wall_time_limit_s=None, lambda_flops_per_second=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_contest(spec)


def folder_with(tmp_path: Path, name: str, source: str) -> SubmissionFiles:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "estimator.py").write_text(source)
    return SubmissionFiles(root=folder)


def from_corpus(tmp_path: Path, name: str, **fill: str) -> SubmissionFiles:
    source = (TAMPERING / name).read_text()
    for key, value in fill.items():
        source = source.replace("{" + key + "}", value)
    return folder_with(tmp_path, name.removesuffix(".py"), source)


def score(contest, files: SubmissionFiles, limits: SandboxLimits) -> tuple[list[dict], list[str | None]]:
    """(the grader's per-MLP entries, meter_tampering per MLP) through the grader's scoring loop."""
    context = SetupContext(width=contest.spec.width, depth=contest.spec.depth, flop_budget=contest.spec.flop_budget,
                           api_version="1.0")
    estimator = SandboxedEstimator(files, context, limits, expected_predicts=len(contest.mlps))
    seen: list[str | None] = []
    original = estimator.predict

    def predict(mlp, budget):
        try:
            return original(mlp, budget)
        finally:
            seen.append((estimator.last_predict_stats() or {}).get("meter_tampering"))

    estimator.predict = predict
    try:
        estimator.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = evaluate_estimator(estimator, contest)
    finally:
        estimator.close()
        _host.prewarm()
    return results["per_mlp"], seen


def shipped_library(tmp_path: Path, kind: str) -> tuple[str, str, Path | None]:
    """(library name, body, the built .so): a shipped .so built with cc, or libm's exp (numeric work outside
    the meter in a library the system ships), which is also what runs where no compiler is installed."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if kind == "libm" or compiler is None:
        return "libm.so.6", LIBM_BODY, None
    source = tmp_path / "relu.c"
    source.write_text(C_SOURCE)
    built = tmp_path / "librelu.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", str(source), "-o", str(built)], check=True, timeout=60)
    return "librelu.so", SHIPPED_BODY, built


TAMPERERS = [
    ("counter_reset.py", V2, ["the budget's counter says", "but flopscope logged", "reset or rewritten"]),
    ("patched_charge.py", V2, ["flopscope was changed: flopscope._budget.BudgetContext._charge_op replaced"]),
    ("swapped_budget.py", V2, ["a budget other than the grader's was charged"]),
    ("raw_numpy.py", V2, ["raw numpy, which this round does not offer, was reached and held in "
                          "estimator.py's np (numpy)"]),
    ("hidden_work.py", V1, ["the metered call add took", "work done inside it", "was not counted"]),
]


@pytest.mark.parametrize(("name", "limits", "phrases"), TAMPERERS, ids=[t[0] for t in TAMPERERS])
def test_each_tampering_technique_is_named_on_every_mlp(contest, tmp_path, name, limits, phrases):
    per_mlp, seen = score(contest, from_corpus(tmp_path, name), limits)
    assert len(seen) == len(per_mlp) == 2
    for entry, sentence in zip(per_mlp, seen, strict=True):
        assert sentence is not None, name
        assert sentence[0].isupper() and sentence.endswith(".") and "\n" not in sentence
        for phrase in phrases:
            assert phrase.lower() in sentence.lower(), sentence
        assert not entry["budget_exhausted"] and not entry.get("error")  # the grader's verdict: scored


def test_a_counter_reset_is_billed_as_the_grader_bills_it(contest, tmp_path):
    """The flag changes nothing the grader reports: the reset run is billed what the counter says, same MSE."""
    per_mlp, seen = score(contest, from_corpus(tmp_path, "counter_reset.py"), V2)
    twin, clean = score(contest, from_corpus(tmp_path, "counter_reset_twin.py"), V2)
    assert clean == [None, None] and all(sentence for sentence in seen)
    assert [e["final_layer_mse"] for e in per_mlp] == [e["final_layer_mse"] for e in twin]
    for reset, honest, sentence in zip(per_mlp, twin, seen, strict=True):
        assert 0 < reset["flops_used"] < honest["flops_used"] / 5  # billed only what ran after the reset
        assert f"counter says {reset['flops_used']:,} FLOPs" in sentence  # the number the grader billed


@pytest.mark.parametrize("kind", ["shipped", "libm"])
def test_a_shared_library_called_through_ctypes_is_named(contest, tmp_path, kind):
    library, body, built = shipped_library(tmp_path, kind)
    files = from_corpus(tmp_path, "ctypes_library.py", library=library, symbol="relu_matvec")
    entry = files.root / "estimator.py"
    entry.write_text(entry.read_text().replace("raise NotImplementedError  # the test puts the library call here",
                                               body))
    if built is not None:
        shutil.copy(built, files.root / library)
    per_mlp, seen = score(contest, files, V1)
    assert all(not e.get("error") for e in per_mlp), per_mlp
    symbol = "relu_matvec in librelu.so" if built is not None else "exp in libm.so.6"
    for sentence in seen:  # looked up once, in the first predict; held and called in every one
        assert sentence is not None, seen
        assert f"looked up the foreign function {symbol} through ctypes during predict" in sentence.lower()
        assert sentence.endswith("calls to foreign functions are work the meter does not see.")
        if built is not None:
            assert sentence.startswith("Loaded its own shared library librelu.so through ctypes during setup; ")


TWINS = [("counter_reset_twin.py", V2), ("patched_charge_twin.py", V2), ("swapped_budget_twin.py", V2),
         ("raw_numpy_twin.py", V2), ("ctypes_library_twin.py", V1), ("hidden_work_twin.py", V1)]


@pytest.mark.parametrize(("name", "limits"), TWINS, ids=[t[0] for t in TWINS])
def test_honest_twins_are_not_flagged(contest, tmp_path, name, limits):
    per_mlp, seen = score(contest, from_corpus(tmp_path, name), limits)
    assert all(not e.get("error") and e["flops_used"] > 0 for e in per_mlp), per_mlp
    assert seen == [None, None]


BASELINES = ["MeanPropagationEstimator", "CovariancePropagationEstimator", "CombinedEstimator"]


@pytest.mark.parametrize("limits", [V1, V2], ids=["v1", "v2"])
@pytest.mark.parametrize("baseline", BASELINES)
def test_whestbench_baselines_are_clean(contest, tmp_path, baseline, limits):
    source = f"from whestbench.estimators import {baseline}\n\n\nclass Estimator({baseline}):\n    pass\n"
    per_mlp, seen = score(contest, folder_with(tmp_path, baseline, source), limits)
    assert all(not e.get("error") and e["flops_used"] > 0 for e in per_mlp)
    assert seen == [None, None]


def test_the_starter_estimator_whest_init_writes_is_clean(contest, tmp_path, preloaded):
    """``whest init`` as a process of its own, forked with whestbench imported (tests/preloaded.py)."""
    init = preloaded.start("whest", "init", str(tmp_path / "starter"))
    _, stderr = init.communicate(timeout=120)
    assert init.returncode == 0, stderr
    per_mlp, seen = score(contest, SubmissionFiles(root=tmp_path / "starter"), V2)
    assert all(not e.get("error") for e in per_mlp)
    assert seen == [None, None]


#: Hostile estimators that return a prediction (the others never reach the end of predict).
RETURNING = ["good.py", "chatty.py", "nan.py", "wrong_shape.py", "over_budget.py", "protocol_forger.py",
             "snoop.py", "host_tmp_reader.py"]


@pytest.mark.parametrize("name", RETURNING)
def test_hostile_estimators_that_return_are_not_flagged(contest, tmp_path, name):
    source = (HOSTILE / name).read_text().replace("{secret_path}", str(tmp_path / "absent"))
    _, seen = score(contest, folder_with(tmp_path, name.removesuffix(".py"), source), V1)
    assert seen and all(sentence is None for sentence in seen), seen


@pytest.mark.parametrize("limits", [V1, V2], ids=["v1", "v2"])
def test_the_score_corpus_is_clean(contest, tmp_path, limits):
    """Every participant-shaped submission of the ``score`` corpus that gets to predict is not flagged."""
    from tests.cli.test_score_corpus import CORPUS, write_folder

    reported = 0
    for name, files in CORPUS.items():
        folder = write_folder(tmp_path / f"{name}-{limits.environment.round_tag}", files)
        try:
            _, seen = score(contest, SubmissionFiles(root=folder), limits)
        except Exception:  # noqa: BLE001 - a submission that fails to load (syntax error, no class) has no predict
            continue
        assert all(sentence is None for sentence in seen), (name, seen)
        reported += len(seen)
    assert reported >= 4  # at least the data folder and the package scored both MLPs


def test_a_flopscope_functions_code_replaced_in_place_is_seen_as_it_happens(tmp_path):
    """``f.__code__ = ...`` leaves the function object in place (the snapshot cannot see it): the audit hook does."""
    import flopscope._budget as budget_state

    from whestboard.sandbox import _meter

    watch = _meter.MeterWatch((str(tmp_path),), numpy_offered=True)
    target = budget_state._validate_namespace_segment
    original = target.__code__
    try:
        watch.install()
        watch.enter("setup")
        target.__code__ = (lambda name: name).__code__
        watch.pause()
    finally:
        target.__code__ = original
        _meter._WATCH = None  # the hook stays (it cannot be removed) but no longer records
    assert list(watch.standing.items.values()) == [
        "flopscope._budget._validate_namespace_segment.__code__ was changed during setup"]
