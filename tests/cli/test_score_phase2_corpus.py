"""Honest Phase 2 code scores under the Phase 2 import rule exactly as ``whest run`` scores it.

The corpus is code written for a grader without numpy: it imports only flopscope, whestbench and the
standard library, and touches what makes numpy's C code import its own modules (``str(dtype)``,
``.mean()``, printing an array, pickling it); and the no-numpy fallback pattern of real submissions
(``try: import numpy`` / ``except ModuleNotFoundError: sys.modules["numpy"] = flopscope.numpy``, then
``import numpy as np``) with the import finder the same file registers for a package it embeds.
``whest run`` (which has numpy) is the oracle: every untimed per-MLP field must be equal.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.cli.test_score_corpus import write_folder
from tests.upstream import assert_same_per_mlp, make_official
from whestboard.cli import main

BUDGET = 5_000_000
pytestmark = [pytest.mark.usefixtures("private_state"), pytest.mark.slow]

NUMPY_INTERNALS = """
    import pickle
    import sys

    import flopscope.numpy as fnp
    from whestbench.estimators import MeanPropagationEstimator


    class Estimator(MeanPropagationEstimator):
        def predict(self, mlp, budget):
            first = mlp.weights[0]
            if str(first.dtype) != "float32":
                raise TypeError(f"weights are {first.dtype}")
            print("layer 1:", first.dtype, first.shape, first[0, :3], file=sys.stderr)
            centre = float(first.mean())
            means = super().predict(mlp, budget)
            print(repr(means[-1, :2]), file=sys.stderr)
            return pickle.loads(pickle.dumps(means)) + fnp.float32(0.0) * centre
    """
FALLBACK_ALIAS = '''
    import importlib.abc
    import importlib.util
    import sys

    import flopscope

    try:
        import numpy
    except ModuleNotFoundError:  # the grader's Python: numpy's functions come metered, from flopscope
        sys.modules["numpy"] = flopscope.numpy
    import numpy as np
    from numpy import float32

    EMBEDDED = {"port_np": "", "port_np._backend": "import numpy as np\\n\\n\\ndef unit():\\n    return np.float32(1.0)\\n"}


    class EmbeddedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Serves the package this file embeds, as ports of numpy-only code do."""

        def find_spec(self, name, path=None, target=None):
            if name in EMBEDDED:
                return importlib.util.spec_from_loader(name, self, is_package=name == "port_np")
            return None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            exec(EMBEDDED[module.__name__], module.__dict__)


    sys.meta_path.insert(0, EmbeddedFinder())
    from port_np import _backend  # noqa: E402
    from whestbench.estimators import MeanPropagationEstimator  # noqa: E402


    class Estimator(MeanPropagationEstimator):
        def predict(self, mlp, budget):
            return super().predict(mlp, budget) * float(_backend.unit()) * float(float32(1.0)) + float(np.float32(0))
    '''
CORPUS = {"numpy-internals": NUMPY_INTERNALS, "fallback-alias": FALLBACK_ALIAS}


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("phase2") / "ds", width=16, depth=3, n_samples=2000,
                         seeds=[5, 6, 7])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("submissions")
    return {name: write_folder(root / name, {"estimator.py": text}) for name, text in CORPUS.items()}


@pytest.fixture(scope="module")
def whest_reports(official, corpus, preloaded, tmp_path_factory) -> dict[str, tuple[int, dict]]:
    """``whest run --json`` on each, all at once, each its own process (forked: tests/preloaded.py)."""
    hf = tmp_path_factory.mktemp("hf")
    running = {name: preloaded.start("whest", "run", "--estimator", str(folder / "estimator.py"), "--dataset",
                                     str(official), "--json", "--runner", "local", "--flop-budget", str(BUDGET),
                                     env=dict(os.environ, HF_HOME=str(hf / name), HF_DATASETS_OFFLINE="1"))
               for name, folder in corpus.items()}
    reports = {}
    for name, proc in running.items():
        out, err = proc.communicate(timeout=600)
        assert out.strip(), f"whest run printed nothing for {name}: {err[-2000:]}"
        reports[name] = (proc.returncode, json.loads(out))
    return reports


@pytest.mark.parametrize("name", list(CORPUS))
def test_honest_phase2_code_scores_under_the_phase2_rule_as_whest_run_scores_it(capsys, official, corpus,
                                                                                  whest_reports, name):
    capsys.readouterr()
    status = main(["score", "--dataset", str(official), "--estimator", str(corpus[name]), "--round", "v2-phase2",
                   "--budget", str(BUDGET), "--json"])
    ours = json.loads(capsys.readouterr().out)
    whest_status, theirs = whest_reports[name]
    assert theirs["results"]["n_failed_mlps"] == 0, theirs
    assert status == whest_status == 0, ours.get("error") or [e.get("traceback") for e in ours["results"]["per_mlp"]]
    assert ours["whestboard"]["grader_environment"]["restricted"]
    assert assert_same_per_mlp(ours, theirs) > 36
    if name == "numpy-internals":  # what predict printed comes back, as `check` shows it
        output = ours["whestboard"]["estimator_output"]
        assert output["text"].count("layer 1: float32 (16, 16)") == 3 and not output["truncated"]


LOUD = """
    import sys

    from whestbench.estimators import MeanPropagationEstimator


    class Estimator(MeanPropagationEstimator):
        def predict(self, mlp, budget):
            print("start of predict")
            sys.stderr.write("x" * 200_000 + "\\n")
            print("end of predict")
            return super().predict(mlp, budget)
    """


def test_score_shows_what_the_estimator_printed_bounded_in_text_and_json(capsys, official, tmp_path):
    (tmp_path / "estimator.py").write_text(textwrap.dedent(LOUD).lstrip())
    args = ["score", "--dataset", str(official), "--estimator", str(tmp_path), "--round", "v2-phase2",
            "--budget", str(BUDGET), "--mlps", "0"]
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    output = json.loads(capsys.readouterr().out)["whestboard"]["estimator_output"]
    assert output["truncated"] and output["bytes"] > 200_000 and len(output["text"]) < 70_000
    assert output["text"].startswith("start of predict") and output["text"].rstrip().endswith("end of predict")
    assert "bytes of output omitted" in output["text"]
    assert main(args) == 0  # served from the run store: the output was recorded with the run
    text = capsys.readouterr().out
    assert "estimator output (first and last part of" in text and "end of predict" in text
