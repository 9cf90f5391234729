"""Dash callbacks through Flask's test client, timed and weighed: no server, no network.

The page benchmarks measure what a callback costs the app itself, so they
call it in-process the way the renderer would over HTTP: the same payload to
``/_dash-update-component``, the answer's time and size returned with it.
"""

from __future__ import annotations

import json
import time


def component_key(component_id: str | dict) -> str:
    """How Dash names a component in an output key: its id, or a pattern id as sorted compact JSON."""
    return component_id if isinstance(component_id, str) else json.dumps(component_id, sort_keys=True,
                                                                           separators=(",", ":"))


class TestClientCaller:
    """One simulated renderer over ``server.test_client()``."""

    def __init__(self, server) -> None:
        self.http = server.test_client()
        self.http.get("/")  # registers the page router, as the first browser request does

    def router(self, pathname: str, search: str = "") -> tuple[float, int, dict]:
        """The Dash pages router callback: what a visit to ``pathname?search`` renders."""
        return self.callback([("_pages_content", "children"), ("_pages_store", "data")],
                             [("_pages_location", "pathname", pathname), ("_pages_location", "search", search)])

    def callback(self, outputs, inputs, state=(), changed=None, output_key=None) -> tuple[float, int, dict]:
        """POST one callback; returns (seconds, response bytes, response JSON)."""
        out = "...".join(f"{component_key(i)}.{p}" for i, p in outputs)
        payload = {
            "output": output_key or (f"..{out}.." if len(outputs) > 1 else out),
            "outputs": [{"id": i, "property": p} for i, p in outputs] if len(outputs) > 1
            else {"id": outputs[0][0], "property": outputs[0][1]},
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
            "changedPropIds": changed or [f"{component_key(inputs[0][0])}.{inputs[0][1]}"],
        }
        return self.post(payload)

    def post(self, payload: dict) -> tuple[float, int, dict]:
        """POST a callback payload as the renderer does; returns (seconds, response bytes, response JSON)."""
        started = time.perf_counter()
        response = self.http.post("/_dash-update-component", json=payload)
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {response.data[:500]!r}")
        return elapsed, len(response.data), response.get_json()
