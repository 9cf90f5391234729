"""A headless Dash client: loads a page and fires its callbacks the way the renderer does.

The load test needs hundreds of simulated users on a 2-core machine, which
rules out real browsers; the production tests need to drive background
callbacks across gunicorn workers. Both speak Dash's HTTP protocol directly:

- ``GET <page>`` (config with the signed ``end_id``), ``/_dash-layout``,
  ``/_dash-dependencies``;
- ``POST /_dash-update-component?endId=...`` per callback; a background
  callback answers ``{cacheKey, job}`` and is polled until it has a response.

:class:`PageSession` is a small renderer: it mounts the layout (``dcc.Location``
reports its path, which routes Dash pages), fires every initial callback in
dependency order, applies outputs, and fires the callbacks they trigger.
Pattern-matching and clientside callbacks are skipped (counted in ``skipped``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests

CONFIG_RE = re.compile(r'<script id="_dash-config" type="application/json">(.*?)</script>', re.S)
LOOPBACK_HOSTS = ("localhost", "::1", "[::1]")


def require_loopback(base_url: str) -> None:
    """Refuse any target that is not this machine: load is only ever sent to loopback."""
    host = urlsplit(base_url).hostname or ""
    if not (host.startswith("127.") or host in LOOPBACK_HOSTS):
        raise ValueError(f"refusing non-loopback target {base_url!r}: only 127.0.0.0/8, localhost or ::1")


class CallbackFailed(RuntimeError):
    """A callback answered with an HTTP error or never finished (``status`` 0), with the answer's text."""

    def __init__(self, message: str, status: int = 0, body: str = "") -> None:
        super().__init__(message)
        self.status, self.body = status, body


@dataclass
class Timing:
    kind: str  # "page", "callback", "bg-start", "bg-poll", "bg-run"
    label: str
    seconds: float
    status: int
    ok: bool


def stringify_id(cid: Any) -> str:
    if isinstance(cid, dict):
        return json.dumps(cid, sort_keys=True, separators=(",", ":"))
    return str(cid)


def split_output(spec: str) -> list[tuple[str, str]]:
    """``"..a.b...c.d.."`` or ``"a.b"`` into [(id, prop), ...]."""
    parts = spec[2:-2].split("...") if spec.startswith("..") else [spec]
    return [tuple(p.rsplit(".", 1)) for p in parts]  # type: ignore[misc]


def _is_component(value: Any) -> bool:
    return isinstance(value, dict) and "type" in value and "props" in value and "namespace" in value


def walk(tree: Any, found: dict[str, dict], types: dict[str, str]) -> None:
    """Collect every component with an id: id -> its props (the renderer's store)."""
    if isinstance(tree, list):
        for item in tree:
            walk(item, found, types)
        return
    if not _is_component(tree):
        return
    props = tree["props"]
    if props.get("id") is not None:
        key = stringify_id(props["id"])
        found[key] = props
        types[key] = tree["type"]
    for value in props.values():
        if isinstance(value, (list, dict)):
            walk(value, found, types)


class DashClient:
    """One simulated browser: a requests session plus the timings of everything it sent."""

    def __init__(self, base_url: str, *, timeout: float = 120.0, record: Callable[[Timing], None] | None = None,
                 keepalive: bool = True):
        require_loopback(base_url)
        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        if not keepalive:  # a new connection per request: consecutive requests spread over workers
            self.http.headers["Connection"] = "close"
        self.responses: list[requests.Response] = []
        self.timeout = timeout
        self.timings: list[Timing] = []
        self._record = record
        self.end_id: str | None = None
        self._deps: list[dict] | None = None
        self.callback_kind = "callback"  # "action" while replaying a user's click (PageSession.click)

    def _note(self, kind: str, label: str, started: float, status: int, ok: bool) -> None:
        t = Timing(kind, label, time.perf_counter() - started, status, ok)
        self.timings.append(t)
        if self._record:
            self._record(t)

    def get(self, path: str, kind: str = "page") -> requests.Response:
        started = time.perf_counter()
        try:
            r = self.http.get(self.base + path, timeout=self.timeout)
        except requests.RequestException:
            self._note(kind, path.split("?")[0], started, 0, False)
            raise
        self.responses.append(r)
        self._note(kind, path.split("?")[0], started, r.status_code, r.status_code < 400)
        if r.status_code >= 400:
            raise CallbackFailed(f"GET {path} -> {r.status_code}")
        return r

    def open(self, path: str) -> tuple[dict, list[dict]]:
        """Load a page as the browser does: HTML (for end_id), layout, dependencies."""
        html = self.get(path).text
        match = CONFIG_RE.search(html)
        self.end_id = json.loads(match.group(1)).get("end_id") if match else None
        layout = self.get("/_dash-layout").json()
        if self._deps is None:
            self._deps = self.get("/_dash-dependencies").json()
        return layout, self._deps

    def fire(self, dep: dict, values: dict[str, dict], changed: list[str], *, max_seconds: float | None = None) -> dict:
        """POST one callback with inputs/state taken from ``values``; polls background callbacks."""
        outputs = [{"id": _parse_id(i), "property": p} for i, p in split_output(dep["output"])]
        body = {
            "output": dep["output"],
            "outputs": outputs if dep["output"].startswith("..") else outputs[0],
            "inputs": [_arg(a, values) for a in dep["inputs"]],
            "changedPropIds": changed,
            "state": [_arg(a, values) for a in dep.get("state", [])],
        }
        label = dep["output"]
        if dep.get("background"):
            return self._run_background(dep, body, label, max_seconds or self.timeout)
        data, status = self.post(body, {}, self.callback_kind, label)
        return data if status == 200 else {}

    def post(self, body: dict, args: dict, kind: str, label: str) -> tuple[dict, int]:
        params = {"endId": self.end_id, **args} if self.end_id else dict(args)
        started = time.perf_counter()
        try:
            r = self.http.post(self.base + "/_dash-update-component", params=params, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            self._note(kind, label, started, 0, False)
            raise CallbackFailed(f"{label}: {exc}") from exc
        self.responses.append(r)
        ok = r.status_code in (200, 204)
        self._note(kind, label, started, r.status_code, ok)
        if not ok:
            raise CallbackFailed(f"{label} -> HTTP {r.status_code}: {r.text[:300]}", r.status_code, r.text)
        return (r.json() if r.status_code == 200 else {}), r.status_code

    def _run_background(self, dep: dict, body: dict, label: str, max_seconds: float) -> dict:
        started = time.perf_counter()
        first, status = self.post(body, {}, "bg-start", label)
        if "response" in first or status == 204:
            return first
        handles = {"cacheKey": first["cacheKey"], "job": first["job"]}
        poll_body = json.loads(json.dumps(body))
        for arg in poll_body["inputs"] + poll_body["state"]:
            arg["value"] = None
        interval = max(0.05, (dep["background"].get("interval") or 500) / 1000)
        progress: list[dict] = []
        while True:
            data, status = self.post(poll_body, handles, "bg-poll", label)
            if data.get("progress"):
                progress.append(data["progress"])
            if "response" in data or status == 204 or data.get("sideUpdate"):
                self._note("bg-run", label, started, status, "response" in data)
                data["progress_seen"] = progress
                return data
            if time.perf_counter() - started > max_seconds:
                self._note("bg-run", label, started, 0, False)
                raise CallbackFailed(f"{label}: no result after {max_seconds:.0f} s")
            time.sleep(interval)


def _parse_id(raw: str) -> Any:
    return json.loads(raw) if raw.startswith("{") else raw


def _arg(spec: dict, values: dict[str, dict]) -> dict:
    props = values.get(spec["id"], {})
    return {"id": _parse_id(spec["id"]), "property": spec["property"], "value": props.get(spec["property"])}


def _is_pattern(dep: dict) -> bool:
    ids = [i for i, _ in split_output(dep["output"])] + [a["id"] for a in dep["inputs"] + dep.get("state", [])]
    return any(str(i).startswith("{") for i in ids)


@dataclass
class PageSession:
    """The renderer's view of one loaded page: component props, and callbacks fired so far."""

    client: DashClient
    path: str
    values: dict[str, dict] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    fired: int = 0
    skipped: int = 0
    max_callbacks: int = 60
    _last_changed: list[str] = field(default_factory=list)

    def load(self) -> PageSession:
        layout, deps = self.client.open(self.path)
        self.deps = [d for d in deps if not d.get("clientside_function") and not _is_pattern(d)]
        self.skipped = len(deps) - len(self.deps)
        walk(layout, self.values, self.types)
        changed = self._mount_locations(self.values)
        self._settle(self._initial(set(self.values)) + self._triggered(changed), changed)
        return self

    def _mount_locations(self, ids) -> list[str]:
        path, _, query = self.path.partition("?")
        changed = []
        for cid in list(ids):
            if self.types.get(cid) == "Location":
                self.values[cid].update(pathname=path, search=f"?{query}" if query else "", hash="",
                                        href=self.client.base + self.path)
                changed += [f"{cid}.pathname", f"{cid}.search"]
        return changed

    def _initial(self, new_ids: set[str]) -> list[dict]:
        """Callbacks whose inputs all exist and include a new component, unless prevent_initial_call."""
        ready = []
        for dep in self.deps:
            ins = [a["id"] for a in dep["inputs"]]
            outs = [i for i, _ in split_output(dep["output"])]
            if dep.get("prevent_initial_call") or not ins:
                continue
            if all(i in self.values for i in ins + outs) and any(i in new_ids for i in ins + outs):
                ready.append(dep)
        return ready

    def _triggered(self, changed: list[str]) -> list[dict]:
        keys = set(changed)
        return [d for d in self.deps if any(f"{a['id']}.{a['property']}" in keys for a in d["inputs"])
                and all(i in self.values for i, _ in split_output(d["output"]))]

    def _settle(self, queue: list[dict], changed: list[str]) -> None:
        pending = {d["output"]: d for d in queue}
        while pending and self.fired < self.max_callbacks:
            produced = {o for d in pending.values() for o in _outputs(d)}
            ready = [d for d in pending.values()
                     if not any(f"{a['id']}.{a['property']}" in produced - set(_outputs(d)) for a in d["inputs"])]
            dep = (ready or list(pending.values()))[0]
            del pending[dep["output"]]
            trig = [f"{a['id']}.{a['property']}" for a in dep["inputs"]
                    if f"{a['id']}.{a['property']}" in changed] or [f"{a['id']}.{a['property']}" for a in dep["inputs"][:1]]
            data = self.client.fire(dep, self.values, trig)
            self.fired += 1
            for dep2 in self.apply(data):
                pending.setdefault(dep2["output"], dep2)
            changed = changed + list(self._last_changed)

    def apply(self, data: dict) -> list[dict]:
        """Apply a callback's response (and side updates); return the callbacks it triggers."""
        updates = dict(data.get("response") or {})
        for cid, props in (data.get("sideUpdate") or {}).items():
            updates.setdefault(cid, {}).update(props)
        new_ids: set[str] = set()
        changed: list[str] = []
        for cid, props in updates.items():
            self.values.setdefault(cid, {}).update(props)
            for prop, value in props.items():
                changed.append(f"{cid}.{prop}")
                if isinstance(value, (list, dict)):
                    before = set(self.values)
                    walk(value, self.values, self.types)
                    new_ids |= set(self.values) - before
        changed += self._mount_locations(new_ids)
        self._last_changed = changed
        return self._initial(new_ids) + self._triggered(changed)

    def click(self, component_id: str, prop: str = "n_clicks", value: Any = None, *, max_seconds: float | None = None
              ) -> list[dict]:
        """Change one prop (a click by default) and fire what it triggers; returns the responses."""
        props = self.values.setdefault(component_id, {})
        props[prop] = value if value is not None else (props.get(prop) or 0) + 1
        key = f"{component_id}.{prop}"
        results = []
        self.client.callback_kind = "action"
        try:
            for dep in self._triggered([key]):
                data = self.client.fire(dep, self.values, [key], max_seconds=max_seconds)
                self.fired += 1
                results.append(data)
                self._settle(self.apply(data), [key])
        finally:
            self.client.callback_kind = "callback"
        return results



def _outputs(dep: dict) -> list[str]:
    return [f"{i}.{p}" for i, p in split_output(dep["output"])]
