"""The upload page's pure pieces: the default MLP selection and the session-uploads list."""

from __future__ import annotations

from components.upload_panels import SESSION_UPLOADS_MAX, default_mlps, session_entries


def test_the_default_selection_names_mlps_the_dataset_has():
    assert default_mlps([0, 1, 2]) == "0:3"  # a 3-MLP dataset: all of them
    assert default_mlps(list(range(100))) == "0:4"
    assert default_mlps([3, 5, 8, 9, 11]) == "3,5,8,9"  # a dataset with gaps: its first four, by name
    assert default_mlps([7, 8]) == "7:9" and default_mlps([]) == ""


def test_session_uploads_grow_newest_last_at_most_twenty_without_repeats():
    entries = None
    for n in range(SESSION_UPLOADS_MAX + 5):
        entries = session_entries(entries, {"upload": f"{n:064x}", "label": f"e{n}.py", "run_id": str(n),
                                            "dataset": "v1-warmup", "round": "v1-warmup"})
    assert len(entries) == SESSION_UPLOADS_MAX == 20
    assert entries[-1]["label"] == "e24.py" and entries[0]["label"] == "e5.py"
    assert session_entries(entries, dict(entries[-1])) is None  # the same ended job is not added twice
    assert session_entries(["garbage", {"upload": "x"}], {"upload": "y"}) == [{"upload": "x"}, {"upload": "y"}]
