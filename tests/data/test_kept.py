"""Datasets kept from the playground: bounded in count, per visitor and in bytes; dropped by their owner or the
organizer only; a keep that finds itself past a bound once stored takes itself back."""

from __future__ import annotations

import pytest

from whestboard import config
from whestboard.data import (
    KeepRefused,
    KeptLimits,
    check_room,
    drop_kept,
    keep_generated,
    kept_datasets,
    kept_name,
    parse_shape,
    served_datasets,
)
from whestboard.data import _kept
from whestboard.store import blob_keys

pytestmark = pytest.mark.usefixtures("private_state")
SAMPLES = 1000


def _keep(seed: int, owner: str | None):
    return keep_generated(parse_shape(8, 2, seed), SAMPLES, owner=owner)


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_KEPT_MAX", "3")
    monkeypatch.setenv("WHESTBOARD_KEPT_PER_CLIENT", "2")
    return KeptLimits.from_env()


def test_the_limits_are_read_from_the_environment(monkeypatch):
    assert KeptLimits.from_env() == KeptLimits(64, 8, 256 << 20)
    monkeypatch.setenv("WHESTBOARD_KEPT_MAX_MB", "1.5")
    assert KeptLimits.from_env().max_bytes == int(1.5 * (1 << 20))
    monkeypatch.setenv("WHESTBOARD_KEPT_PER_CLIENT", "many")
    with pytest.raises(ValueError, match="WHESTBOARD_KEPT_PER_CLIENT='many' is not a whole number"):
        config.kept_datasets_limits()


def test_a_visitor_keeps_up_to_the_limit_then_is_told_why(small_limits):
    first, second = _keep(1, "alice"), _keep(2, "alice")
    assert [k.owner for k in kept_datasets()] == ["alice", "alice"]
    assert {first.name, second.name} <= set(served_datasets())
    with pytest.raises(KeepRefused, match=r"you have kept 2 datasets, this server's limit per visitor "
                                          r"\(WHESTBOARD_KEPT_PER_CLIENT = 2\): drop one of yours first"):
        _keep(3, "alice")
    assert kept_name(parse_shape(8, 2, 3), SAMPLES) not in blob_keys("kept-dataset")  # refused before any work
    assert _keep(1, "bob") == first  # the same MLP kept again is the one already kept: no room needed
    _keep(4, "bob")
    with pytest.raises(KeepRefused, match=r"keeps at most 3 datasets made in the playground \(WHESTBOARD_KEPT_MAX\) "
                                          "and holds 3"):
        _keep(5, "carol")


def test_only_the_owner_or_the_organizer_drops_a_kept_dataset(small_limits):
    mine = _keep(1, "alice").name
    with pytest.raises(KeepRefused, match="is not yours to drop"):
        drop_kept(mine, owner="bob")
    with pytest.raises(KeepRefused, match="is not yours to drop"):
        drop_kept(mine, owner=None)
    drop_kept(mine, owner="alice")
    assert mine not in blob_keys("kept-dataset") and mine not in served_datasets()
    with pytest.raises(KeepRefused, match="no kept dataset"):
        drop_kept(mine, owner="alice")
    theirs = _keep(2, "bob").name
    drop_kept(theirs, owner=None, organizer=True)
    assert kept_datasets() == []
    _keep(3, "alice")  # room again


def test_the_bytes_bound_refuses_before_the_truth_is_drawn(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_KEPT_MAX_MB", "0.05")  # 51 KiB: less than one record's overhead
    with pytest.raises(KeepRefused, match=r"past this server's 0\.05 MiB \(WHESTBOARD_KEPT_MAX_MB\)"):
        check_room("alice", 8, 2)
    with pytest.raises(KeepRefused):
        _keep(1, "alice")
    assert kept_datasets() == []


def test_two_keeps_at_once_leave_the_earliest_and_the_late_one_removes_itself(small_limits, monkeypatch):
    """Both passed the check before either was stored (two job processes): the later one, past the per-visitor
    bound once stored, takes itself back and says why."""
    _keep(1, "alice")
    monkeypatch.setattr(_kept, "check_room", lambda *args, **kwargs: None)  # the race: both checked before storing
    _keep(2, "alice")
    with pytest.raises(KeepRefused, match="another keep took the last room meanwhile: the limit per visitor is 2"):
        _keep(3, "alice")
    assert [k.name for k in kept_datasets()] == [kept_name(parse_shape(8, 2, s), SAMPLES) for s in (1, 2)]
    assert kept_name(parse_shape(8, 2, 3), SAMPLES) not in served_datasets()
