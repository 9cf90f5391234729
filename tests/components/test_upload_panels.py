"""The upload page's pure pieces: the default MLP selection, the session-uploads list, the compare links."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

from components.compare_panels import compare_url
from components.upload_panels import SESSION_UPLOADS_MAX, default_mlps, job_card, session_entries


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


def _hrefs(component) -> dict[str, str]:
    """id -> href of every link in a rendered component tree."""
    found = {}
    stack = [component]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
            continue
        if getattr(node, "href", None) is not None and getattr(node, "id", None):
            found[node.id] = node.href
        children = getattr(node, "children", None)
        if children is not None and not isinstance(children, str):
            stack.append(children)
    return found


def test_a_finished_upload_links_to_its_paired_comparison_with_each_baseline():
    job = SimpleNamespace(id=7, result={"ok": True, "run_id": "r-up", "upload": {"filename": "est.py"},
                                        "baselines": {"mean": "r-mean", "cov": None}},
                          progress=None, started_at=2.0, created_at=1.0, status="finished", spec={"dataset": "v1-warmup"})
    links = _hrefs(job_card(job, now=3.0))
    assert links["upload-compare-mean"] == compare_url("run:r-up", "run:r-mean")
    assert "upload-compare-cov" not in links  # a baseline that could not be scored has no link
    assert links["upload-compare-link"] == compare_url("run:r-up")
    assert parse_qs(urlparse(links["upload-compare-mean"]).query) == {"a": ["run:r-up"], "b": ["run:r-mean"]}


def _texts(component) -> dict[str, str]:
    """id -> text of every link in a rendered component tree."""
    found, stack = {}, [component]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
            continue
        if getattr(node, "href", None) is not None and getattr(node, "id", None):
            found[node.id] = node.children
        children = getattr(node, "children", None)
        if children is not None and not isinstance(children, str):
            stack.append(children)
    return found


def test_the_compare_links_name_the_baselines_as_the_figure_beside_them_does():
    """"covariance propagation", as the per-layer figure's legend and every other page name it (the link read
    "cov propagation", its spec glued to a word)."""
    from components.figures.upload import LABELS

    job = SimpleNamespace(id=8, result={"ok": True, "run_id": "r-up", "upload": {"filename": "est.py"},
                                        "baselines": {"mean": "r-mean", "cov": "r-cov"}},
                          progress=None, started_at=2.0, created_at=1.0, status="finished", spec={"dataset": "v1-warmup"})
    texts = _texts(job_card(job, now=3.0))
    assert texts["upload-compare-mean"] == LABELS["mean"] == "mean propagation"
    assert texts["upload-compare-cov"] == LABELS["cov"] == "covariance propagation"
