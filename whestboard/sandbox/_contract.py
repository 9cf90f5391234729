"""The contract check an uploaded estimator passes before it is scored.

``whest validate`` imports the estimator and calls ``predict`` once with no
budget context: it meters nothing. This check is stricter and runs entirely in
the sandbox, through the grader's own scoring code:

1. **load** – the class resolves as ``whestbench.loader`` resolves it (an
   ``Estimator`` class, or the single ``BaseEstimator`` subclass, or the class
   the manifest names);
2. **setup** – ``setup()`` returns within the setup timeout;
3. **predict** – on a small MLP generated with ``whestbench.generation.sample_mlp``,
   ``predict`` returns a finite ``(depth, width)`` array within the round's FLOP
   budget, its wall cap and its residual-time rule, judged by
   ``whestbench.scoring.evaluate_estimator`` itself.

Each failed step says what to fix.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from whestboard.rules import Round, error_hint, explained_error, verdict_of
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles, whest_error_of

CONTRACT_WIDTH = 64
CONTRACT_DEPTH = 4

FIXES = {
    "budget": "Spend at most the `budget` argument: scale sample counts or iterations with it.",
    "combined": "Keep F + lambda x R under the budget: residual (non-flopscope) time is priced in this round.",
    "time": "predict() must return within the round's wall cap; cut iterations or fail fast.",
    "residual": "Time outside flopscope ops counts as residual: replace Python loops, prints and plain numpy "
                "with flopscope.numpy calls.",
    "exception": "predict() raised: fix the error shown in the traceback.",
    "shape": "Return a (depth, width) array: stack one row per layer with fnp.stack(rows, axis=0).",
    "non-finite": "Predictions must be finite: guard divisions, logs and square roots against 0 and negatives.",
    "memory": "Stay within the memory limit: avoid materialising (samples x width x width) arrays.",
    "fork": "Do not start processes or threads: the grader prohibits subprocesses; everything runs in predict().",
    "disk": "Write scratch files only under tempfile.gettempdir() (TMPDIR) or the working folder, and keep them "
            "small: use memory, or ship precomputed data inside the submission.",
    "crash": "The worker died: look for os._exit/sys.exit, native crashes or code writing to file descriptors.",
}


@dataclass
class ContractStep:
    """One step of the check; ``fix`` is what the participant should change when it failed."""

    name: str
    ok: bool
    message: str = ""
    fix: str = ""
    traceback: str | None = None
    #: The code ``whest run --json`` gives this failure (``ESTIMATOR_MISSING_MODULE``, ``SETUP_ERROR``, ...).
    code: str = ""


@dataclass
class ContractReport:
    ok: bool
    steps: list[ContractStep]
    class_name: str = ""
    shape: tuple[int, int] = (CONTRACT_DEPTH, CONTRACT_WIDTH)
    stats: dict = field(default_factory=dict)
    confinement: dict = field(default_factory=dict)
    output: str = ""
    #: The grader's import rule the check ran under (``whestboard.rules._environment``).
    environment: dict = field(default_factory=dict)
    #: A failure before predict, as ``whest run --json`` names it (``stage``, ``code``, ``message``).
    error: dict | None = None
    #: Files of the submission folder the estimator tried to open and did not find.
    missing_files: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        failed = [s for s in self.steps if not s.ok]
        if not failed:
            return f"contract ok: {self.class_name} loads, sets up and predicts within the rules"
        step = failed[0]
        return f"contract failed at {step.name}: {step.message}" + (f" — {step.fix}" if step.fix else "")

    def verdict(self) -> str:
        """``summary`` without the failure's sentence: for a view that says the sentence once, elsewhere."""
        failed = [s for s in self.steps if not s.ok]
        if not failed:
            return self.summary()
        step = failed[0]
        return f"contract failed at {step.name}" + (f" ({step.code})" if step.code else "")


def contract_mlp(width: int, depth: int, seed: int = 0):
    from whestbench.generation import sample_mlp

    return sample_mlp(width, depth, np.random.default_rng(seed), seed=seed)


def check_contract(
    submission: SubmissionFiles,
    rnd: Round,
    limits: SandboxLimits | None = None,
    *,
    width: int | None = None,
    depth: int | None = None,
    seed: int = 0,
    should_cancel: Callable[[], bool] | None = None,
    on_started: Callable[[], None] | None = None,
) -> ContractReport:
    """Load, set up and run the estimator once on a small MLP under ``rnd``'s rules, in the sandbox.

    ``on_started`` runs once the worker has loaded and set up the estimator.
    """
    from whestbench.runner import RunnerError
    from whestbench.sdk import SetupContext

    width = width or min(CONTRACT_WIDTH, rnd.width)
    depth = depth or min(CONTRACT_DEPTH, rnd.depth)
    limits = (limits or SandboxLimits.from_env()).for_round(rnd)
    context = SetupContext(width=width, depth=depth, flop_budget=rnd.budget, api_version="1.0", seed=seed)
    estimator = SandboxedEstimator(submission, context, limits, expected_predicts=1, should_cancel=should_cancel)
    report = ContractReport(ok=False, steps=[], shape=(depth, width),
                            environment=limits.environment.as_dict() if limits.environment else {})
    try:
        try:
            started = estimator.start()
        except RunnerError as exc:
            report.error = whest_error_of(exc)
            report.steps += _start_failure(exc, limits, report.error)
            return report
        if on_started is not None:
            on_started()  # e.g. warm the next worker while this one predicts
        report.class_name = started.class_name
        report.confinement = started.confinement
        report.steps += [ContractStep("load", True, f"class {started.class_name} resolved ({started.load_s:.2f} s)"),
                         ContractStep("setup", True, f"setup() returned in {started.setup_s:.2f} s "
                                                     f"(limit {limits.setup_timeout_s:g} s)")]
        report.steps.append(_predict_step(estimator, rnd, limits, width, depth, seed, report))
    finally:
        estimator.close()
        report.output = estimator.output.text()
        report.missing_files = list(estimator.missing_files)
    report.ok = all(step.ok for step in report.steps)
    return report


def _start_failure(exc, limits: SandboxLimits, error: dict | None) -> list[ContractStep]:
    """The failed step of a worker that could not load or set up the estimator, with whest's code and a fix."""
    code = exc.detail.code
    named = (error or {}).get("code") or code
    # whest's message and code, said once with the advice the round's import rule makes apply (a missing
    # module: a package the grader lacks, or a helper that did not ship)
    round_tag = limits.environment.round_tag if limits.environment else None
    explained = explained_error({"code": named, "message": (error or {}).get("message") or exc.detail.message},
                                round_tag)
    message, hint = explained["sentence"], explained["hint"]
    if code == "LOAD_ERROR":
        return [ContractStep("load", False, message, hint, exc.detail.traceback, named)]
    loaded = ContractStep("load", True, "class resolved")
    if code == "SETUP_TIMEOUT":
        return [loaded, ContractStep("setup", False, exc.detail.message, error_hint(code), code=code)]
    if code == "SETUP_ERROR":
        return [loaded, ContractStep("setup", False, message, hint, exc.detail.traceback, named)]
    verdict = verdict_of({"error_code": code, "error": exc.detail.message})[0]
    return [loaded, ContractStep("setup", False, exc.detail.message, FIXES.get(verdict, error_hint(code)),
                                 exc.detail.traceback, code)]


def _predict_step(estimator, rnd: Round, limits: SandboxLimits, width: int, depth: int, seed: int,
                  report: ContractReport) -> ContractStep:
    import flopscope.numpy as fnp
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    spec = ContestSpec(width=width, depth=depth, n_mlps=1, flop_budget=rnd.budget, ground_truth_samples=1,
                       setup_timeout_s=limits.setup_timeout_s, memory_limit_mb=limits.memory_mb,
                       wall_time_limit_s=limits.wall_time_limit_s,
                       residual_wall_time_limit_s=limits.residual_wall_time_limit_s,
                       lambda_flops_per_second=rnd.lambda_flops_per_second)
    zeros = fnp.zeros((depth, width), dtype=fnp.float32)
    data = ContestData(spec=spec, mlps=[contract_mlp(width, depth, seed)], all_layer_targets=[zeros],
                       final_targets=[zeros[-1]], avg_variances=[0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = evaluate_estimator(estimator, data)["per_mlp"][0]
    report.stats = {k: entry.get(k) for k in ("flops_used", "effective_compute", "wall_time_s",
                                               "flopscope_backend_time_s", "flopscope_overhead_time_s",
                                               "residual_wall_time_s")}
    verdict, message = verdict_of(entry)
    if verdict == "ok":
        return ContractStep("predict", True,
                            f"finite ({depth}, {width}) array; {entry['flops_used']:,} FLOPs of {rnd.budget:.3g}, "
                            f"{entry['wall_time_s']:.2f} s wall, {entry['residual_wall_time_s']:.3f} s residual")
    # Only the estimator's own exception has a traceback worth reading; for the others it is the harness's.
    traceback = entry.get("traceback") if verdict == "exception" else None
    return ContractStep("predict", False, f"{verdict}: {message}", FIXES.get(verdict, ""), traceback)
