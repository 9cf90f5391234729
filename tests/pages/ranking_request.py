"""The paged ranking's callback request, as the renderer posts it: one builder for the page tests and the
leaderboard benchmark, so both exercise the same inputs, outputs and trigger."""

from __future__ import annotations

import json


def _key(component_id: dict) -> str:
    """A pattern-matching id as Dash writes it into ``changedPropIds`` (sorted keys, no spaces)."""
    return json.dumps(component_id, sort_keys=True, separators=(",", ":"))


def sort_ids() -> list[dict]:
    """The ids of the ranking's sortable column headers."""
    from pages.leaderboard import RANKING_COLUMNS

    return [{"type": "lb-ranking-sort", "col": c.field} for c in RANKING_COLUMNS if c.sort_by]


def ranking_request(output_key: str, round_tag: str = "v1-warmup", split: str = "public", token: str | None = None,
                    team: str | None = None, state: dict | None = None, filter_text: str = "",
                    trigger: str | dict | None = None) -> dict:
    """The body of ``/_dash-update-component`` for one page of the ranking. ``output_key``: the callback's
    registered output; ``trigger``: the input the viewer changed (a sort header's id for a click)."""
    sorts = sort_ids()
    clicked = _key(trigger) if isinstance(trigger, dict) else None
    plain = [("lb-ranking-prev", "n_clicks", 1 if trigger == "lb-ranking-prev" else None),
             ("lb-ranking-next", "n_clicks", 1 if trigger == "lb-ranking-next" else None),
             ("lb-ranking-filter", "value", filter_text), ("lb-team", "value", team), ("lb-split", "value", split),
             ("lb-token", "value", token), ("lb-revision", "data", 0)]
    sort_inputs = [{"id": i, "property": "n_clicks", "value": 1 if _key(i) == clicked else None} for i in sorts]
    changed = [f"{clicked}.n_clicks"] if clicked else [f"{i}.{p}" for i, p, _ in plain if i == trigger]
    return {"output": output_key,
            "outputs": [{"id": "lb-ranking-body", "property": "children"},
                        [{"id": i, "property": "children"} for i in sorts],
                        {"id": "lb-ranking-pager", "property": "children"},
                        {"id": "lb-ranking-prev", "property": "disabled"},
                        {"id": "lb-ranking-next", "property": "disabled"},
                        {"id": "lb-ranking-state", "property": "data"}],
            "inputs": [sort_inputs] + [{"id": i, "property": p, "value": v} for i, p, v in plain],
            "state": [{"id": "lb-ranking-state", "property": "data", "value": state},
                      {"id": "lb-round", "property": "data", "value": round_tag}],
            "changedPropIds": changed}
