"""Stored predictions come back exactly, for every MLP of a run, read in one decompression."""

from __future__ import annotations

import io

import numpy as np
import pytest

from whestboard.scoring import _run_records

pytestmark = pytest.mark.usefixtures("private_state")


def _report(indices: list[int]) -> dict:
    per_mlp = [{"mlp_index": i, "final_layer_mse": 1e-6, "flops_used": 10} for i in indices]
    return {"source": "cli", "dataset": {"key": "toy"}, "estimator": {"label": "toy", "kind": "mean"},
            "run_config": {"flop_budget": 100}, "versions": {},
            "results": {"per_mlp": per_mlp, "final_layer_mse": 1e-6, "all_layers_mse": 1e-6,
                        "adjusted_final_layer_score": 1e-7}}


def _npz_bytes() -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x=np.zeros(1))
    return buffer.getvalue()


def test_predictions_round_trip_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(0)
    indices = [7, 2, 40, 3]
    predictions = {i: rng.normal(0, 1, (3, 8)).astype(np.float32) for i in indices}
    run_id = _run_records.record_run(_report(indices), predictions=predictions)
    reads = []
    npz = type(np.load(io.BytesIO(_npz_bytes())))
    real_getitem = npz.__getitem__
    monkeypatch.setattr(npz, "__getitem__", lambda self, key: reads.append(key) or real_getitem(self, key))
    back = _run_records.get_run_predictions(run_id)
    # Each member read decompresses it whole: two reads, whatever the number of MLPs (it was one per MLP).
    assert sorted(back) == sorted(indices) and sorted(reads) == ["indices", "predictions"]
    for i in indices:
        assert back[i].dtype == np.float32
        np.testing.assert_array_equal(back[i], predictions[i])
    assert _run_records.get_run_predictions("no-such-run") == {}
