"""Round and dataset selectors, shared by every page and kept in the URL.

A page calls ``resolve_selection(**query)`` on its query parameters
(``?dataset=KEY&round=TAG``), renders ``selector_row(selection, target_path=...)``
and, when the URL names something that is not served, ``not_found_panel``.
Changing a selector navigates to ``target_path?dataset=...&round=...`` through
the shell's ``url`` Location, so the choice is always in a shareable address
and the page re-renders from it (a navigation, unlike a page's own controls, which rewrite the address in
place through ``components.url_state``). One callback here serves every page.
"""

from __future__ import annotations

from dataclasses import dataclass

import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components.url_state import href
from whestboard.data import DatasetNotFound, default_dataset_key, get_dataset, served_datasets
from whestboard.rules import ALL_ROUNDS

ROUND_ID = "selector-round"
DATASET_ID = "selector-dataset"
TARGET_ID = "selector-target"
#: The pages a selector row leads to (its ``target_path``): where a change of round or dataset may navigate.
SELECTOR_PAGES = ("/explorer", "/lab", "/convergence", "/upload")


@dataclass(frozen=True)
class Selection:
    """What the URL resolved to; ``problem`` says why nothing could be shown."""

    dataset_key: str | None
    round_tag: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None and self.dataset_key is not None


def latest_dataset_key(round_tag: str | None = None) -> str | None:
    """The dataset a bare URL shows: the latest round that has data, else the first served."""
    if round_tag is not None:
        return default_dataset_key(round_tag)
    for tag in reversed(list(ALL_ROUNDS)):
        key = default_dataset_key(tag)
        if key is not None:
            return key
    return default_dataset_key()


def resolve_selection(dataset: str | None = None, round: str | None = None, **_ignored) -> Selection:  # noqa: A002
    """Turn ``?dataset=&round=`` into a served dataset, with sensible defaults.

    A named dataset wins (its own round is used); a round alone picks that
    round's first dataset; nothing picks ``default_dataset_key()``.
    """
    dataset = (dataset or "").strip() or None
    round_tag = (round or "").strip() or None
    served = served_datasets()
    if dataset is not None:
        try:  # get_dataset asks the shared store at once: kept on another machine a moment ago?
            named = served[dataset] if dataset in served else get_dataset(dataset)
        except DatasetNotFound:
            return Selection(None, round_tag, f"There is no dataset called {dataset!r}.")
        return Selection(dataset, named.info.round_tag)
    if round_tag is not None:
        if round_tag not in ALL_ROUNDS:
            return Selection(None, None, f"There is no round called {round_tag!r}.")
        key = default_dataset_key(round_tag)
        if key is None:
            return Selection(None, round_tag, f"No dataset of round {round_tag} is served yet.")
        return Selection(key, round_tag)
    key = latest_dataset_key()
    if key is None:
        return Selection(None, None, "No dataset is served yet.")
    return Selection(key, served[key].info.round_tag)


def page_url(path: str, dataset_key: str | None, round_tag: str | None = None, **extra) -> str:
    """``path?dataset=..&round=..`` (and any extra parameters), skipping empty values."""
    return href(path, {"dataset": dataset_key, "round": round_tag, **extra})


def _round_options() -> list[dict]:
    served_rounds = {ds.info.round_tag for ds in served_datasets().values()}
    return [
        {"label": f"{tag} ({rnd.shape_label})" + ("" if tag in served_rounds else " — no data yet"),
         "value": tag, "disabled": tag not in served_rounds}
        for tag, rnd in ALL_ROUNDS.items()
    ]


def _dataset_options() -> list[dict]:
    options = []
    for key, ds in served_datasets().items():
        info = ds.info
        count = f"{info.n_mlps}" if info.complete else f"{info.n_mlps} of {info.declared_n_mlps}"
        damaged = f" ({len(ds.damaged)} damaged)" if ds.damaged else ""
        options.append({"label": f"{key} — {info.round_tag or 'custom'}, {info.shape_label}, {count} MLPs{damaged}",
                        "value": key})
    return options


def selector_row(selection: Selection, *, target_path: str = "/explorer") -> dbc.Row:
    """Round and dataset dropdowns for ``selection``; a change navigates to ``target_path`` (one of
    ``SELECTOR_PAGES``)."""
    if target_path not in SELECTOR_PAGES:
        raise ValueError(f"a selector row leads to one of {', '.join(SELECTOR_PAGES)}, not {target_path!r}")
    return dbc.Row(
        [
            dbc.Col(html.Label("Round", htmlFor=ROUND_ID, className="col-form-label-sm fw-semibold"),
                    width="auto"),
            dbc.Col(dcc.Dropdown(id=ROUND_ID, options=_round_options(), value=selection.round_tag,
                                 clearable=False, searchable=False, placeholder="custom (no round)",
                                 style={"minWidth": "15rem"}),
                    width="auto"),
            dbc.Col(html.Label("Dataset", htmlFor=DATASET_ID, className="col-form-label-sm fw-semibold"),
                    width="auto"),
            dbc.Col(dcc.Dropdown(id=DATASET_ID, options=_dataset_options(), value=selection.dataset_key,
                                 clearable=False, searchable=False, style={"minWidth": "24rem"}),
                    width="auto"),
            dcc.Store(id=TARGET_ID, data={"path": target_path, "dataset": selection.dataset_key,
                                          "round": selection.round_tag}),
        ],
        className="g-2 align-items-center mb-3",
        id="selector-row",
    )


def not_found_panel(title: str, problem: str, *, hint: str | None = None) -> dbc.Alert:
    """A friendly dead end: what was asked for, and every dataset that is served."""
    links = [
        html.Li([dcc.Link(key, href=page_url("/explorer", key)),
                 html.Span(f" — {ds.info.round_tag or 'custom'}, {ds.info.shape_label}, "
                           f"MLP indices {index_range(ds)}", className="text-muted")])
        for key, ds in served_datasets().items()
    ]
    body = [html.H4(title, className="alert-heading"), html.P(problem)]
    if hint:
        body.append(html.P(hint))
    body.append(html.P("Available datasets:", className="mb-1") if links else
                html.P("No dataset is served yet: the embedded data may still be baking."))
    if links:
        body.append(html.Ul(links, className="mb-0"))
    return dbc.Alert(body, color="warning", id="not-found-panel")


def index_range(ds) -> str:
    """The MLP indices a dataset holds, in words; damaged ones are named as such."""
    indices = sorted(ds.indices + list(ds.damaged))
    if not indices:
        return "none yet"
    contiguous = indices == list(range(indices[0], indices[-1] + 1))
    text = f"{indices[0]}–{indices[-1]}" if contiguous else ", ".join(map(str, indices))
    if ds.damaged:
        text += f" ({', '.join(map(str, ds.damaged))} damaged)"
    return text


def navigation_target(round_tag: str | None, dataset_key: str | None, shown: dict | None) -> str | None:
    """Where the selectors lead, or ``None`` when they still show the page's own selection.

    Comparing with what the page shows (not with which input fired) matters: a
    dropdown may report its value when it mounts, which must not navigate.
    A new round goes to its first dataset; a new dataset to itself, with its round.
    """
    shown = shown if isinstance(shown, dict) else {}
    path = shown.get("path") if shown.get("path") in SELECTOR_PAGES else "/explorer"  # a store: never believed
    if round_tag and round_tag != shown.get("round"):
        key = default_dataset_key(round_tag)
        return None if key is None else page_url(path, key, round_tag)
    served = served_datasets()
    if dataset_key and dataset_key != shown.get("dataset") and dataset_key in served:
        return page_url(path, dataset_key, served[dataset_key].info.round_tag)
    return None


@callback(
    Output("url", "href", allow_duplicate=True),
    Input(ROUND_ID, "value"),
    Input(DATASET_ID, "value"),
    State(TARGET_ID, "data"),
    prevent_initial_call=True,
)
def _navigate(round_tag: str | None, dataset_key: str | None, shown: dict | None):
    target = navigation_target(round_tag, dataset_key, shown)
    return no_update if target is None else target
