"""Every callback request checked against what its components can send, before Dash dispatches it.

A browser only ever sends a slider's position between its ``min`` and ``max``, a click count that is a
whole number, a dropdown's value from its options' kind, text in a text box; a hand-made request can
send anything (``99``, ``1e300``, a list where a count belongs, a dict where a round name belongs), and a
callback written for the page's values then raised a 500 with a traceback. Here, once for every page:

* the **domain** of each ``(component id, property)`` a callback reads is derived from the layouts'
  components (their type and attributes: a slider's range, a dropdown's ``multi``)
  and, for properties every component shares (``n_clicks``, ``clickData``, ``contents`` ...), by name;
* :func:`check_callback_body` refuses a body that is not the shape Dash sends, or any input or state
  value outside its domain, with a 400 naming the component, the property and what it accepts;
* values of properties that only the server writes (``dcc.Store`` data) are any JSON, bounded by
  ``server.http``'s size and depth limits; a callback that still cannot use such a value answers 400
  with a sentence through ``server.hooks``, never a 500.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: The most entries a list value (a multi-dropdown's choice, a checklist) may hold.
MAX_LIST = 10_000
#: The longest text a text box may send: what a user may paste (a selection of 100,000 indices is 200,000
#: characters), left to the page's own parser to answer with a sentence; request bodies are capped apart.
MAX_TEXT = 1_000_000
COUNT_PROPS = ("n_clicks", "n_intervals", "n_submit", "n_blur", "n_clicks_timestamp", "n_blur_timestamp",
               "n_submit_timestamp")
EVENT_PROPS = ("clickData", "hoverData", "selectedData", "relayoutData", "restyleData", "cellClicked",
               "cellDoubleClicked", "cellValueChanged", "clickAnnotationData")
TEXT_PROPS = ("search", "hash", "href")

Check = Callable[[Any], str | None]  # None when the value is in the domain, else what the domain is


class OutOfDomain(ValueError):
    """A callback input the page could never send; the message names it and what it accepts."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> str | None:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53)
    return None if ok else "a click count (a whole number from 0) or null"


def _event(value: Any) -> str | None:
    return None if value is None or isinstance(value, dict) else "an event object or null"


def _text(value: Any) -> str | None:
    ok = value is None or (isinstance(value, str) and len(value) <= MAX_TEXT)
    return None if ok else f"text (at most {MAX_TEXT:,} characters) or null"


def _path(value: Any) -> str | None:
    ok = value is None or (isinstance(value, str) and value.startswith("/") and len(value) <= MAX_TEXT)
    return None if ok else "a path starting with / or null"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool) or _is_number(value)


def _choice(value: Any) -> str | None:
    return None if _scalar(value) and not (isinstance(value, str) and len(value) > MAX_TEXT) else \
        "one option's value (text or a number) or null"


def _choices(value: Any) -> str | None:
    if value is None or _choice(value) is None:
        return None
    ok = isinstance(value, list) and len(value) <= MAX_LIST and all(_choice(v) is None for v in value)
    return None if ok else "a list of options' values, one value, or null"


def _text_or_number(value: Any) -> str | None:
    return None if value is None or _is_number(value) or _text(value) is None else "text, a number or null"


def _number_in(low: float | None, high: float | None) -> Check:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        ok = _is_number(value) and (low is None or value >= low) and (high is None or value <= high)
        return None if ok else f"a number from {low:g} to {high:g}" if low is not None and high is not None \
            else "a finite number or null"
    return check


def _range_in(low: float | None, high: float | None) -> Check:
    one = _number_in(low, high)

    def check(value: Any) -> str | None:
        ok = value is None or (isinstance(value, list) and len(value) <= 2 and all(
            v is not None and one(v) is None for v in value))
        return None if ok else f"a list of two numbers from {low:g} to {high:g}"
    return check


def _files(value: Any) -> str | None:
    ok = value is None or isinstance(value, str) or (
        isinstance(value, list) and len(value) <= MAX_LIST and all(isinstance(v, str) for v in value))
    return None if ok else "a file's data (text), a list of them, or null"


def _timestamps(value: Any) -> str | None:
    ok = value is None or _is_number(value) or (
        isinstance(value, list) and len(value) <= MAX_LIST and all(_is_number(v) for v in value))
    return None if ok else "a timestamp, a list of them, or null"


def _switch(value: Any) -> str | None:
    return None if value is None or isinstance(value, bool) or value in ([], [True]) else "true, false or null"


def _rows(value: Any) -> str | None:
    ok = value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value))
    return None if ok else "a list of row objects or null"


def _any(_value: Any) -> str | None:
    return None


#: Domains that depend only on the property's name, whatever the component.
BY_PROPERTY: dict[str, Check] = {
    **{p: _count for p in COUNT_PROPS}, **{p: _event for p in EVENT_PROPS}, **{p: _text for p in TEXT_PROPS},
    "pathname": _path, "contents": _files, "filename": _files, "last_modified": _timestamps, "selectedRows": _rows,
    "virtualRowData": _rows, "rowData": _rows, "active_cell": _event, "is_open": _switch,
}


def value_domain(component: Any) -> Check:
    """The domain of a component's ``value``, from its type and attributes."""
    kind = type(component).__name__
    attrs = getattr(component, "__dict__", {})
    if kind == "Slider":
        return _number_in(attrs.get("min"), attrs.get("max"))
    if kind == "RangeSlider":
        return _range_in(attrs.get("min"), attrs.get("max"))
    if kind == "Dropdown":
        return _choices if attrs.get("multi") else _choice
    if kind in ("Checklist",):
        return _choices
    if kind in ("RadioItems", "Select", "Tabs", "Tab"):
        return _choice
    if kind in ("Switch", "Checkbox"):
        return _switch
    if kind in ("Input", "Textarea"):  # a number box's range may differ per page (an MLP's depth): the
        return _text_or_number          # page's parser names it; here only the kind of value is judged
    return _any


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list | tuple):
            stack.extend(item)
            continue
        if hasattr(item, "_prop_names"):
            yield item
            for name in getattr(item, "_children_props", []) or []:
                child = getattr(item, name.split(".")[0].split("[")[0], None)
                if child is not None:
                    stack.append(child)
            children = getattr(item, "children", None)
            if children is not None:
                stack.append(children)


def id_key(component_id: Any) -> str:
    """A component id as the index keys it: a string id itself; a pattern-matching id by its ``type``."""
    if isinstance(component_id, dict):
        return f"{{type:{component_id.get('type')}}}"
    return str(component_id)


class DomainIndex:
    """``id -> component`` over layouts, asked for the domain of one property."""

    def __init__(self, layouts: list[Any]) -> None:
        self.components: dict[str, Any] = {}
        for layout in layouts:
            for component in _walk(layout):
                cid = getattr(component, "id", None)
                if cid is not None:
                    self.components.setdefault(id_key(cid), component)

    def check(self, component_id: Any, prop: str) -> Check:
        if prop in BY_PROPERTY:
            return BY_PROPERTY[prop]
        if prop == "value":
            component = self.components.get(id_key(component_id))
            return value_domain(component) if component is not None else _text_or_number_or_list
        if prop == "id":
            return lambda v: None if isinstance(v, str | dict) else "a component id"
        return _any


def _text_or_number_or_list(value: Any) -> str | None:
    """A ``value`` of a component made by a callback (not in any layout): a choice or a list of them."""
    return _choices(value) if _choices(value) is None else _text_or_number(value)


def _layouts() -> list[Any]:
    """The shell and every page's layout with no query, as a visitor first gets them."""
    import dash

    from components.shell import layout as shell

    out = [shell() if callable(shell) else shell]
    for page in dash.page_registry.values():
        layout = page.get("layout")
        try:
            out.append(layout() if callable(layout) else layout)
        except Exception:  # noqa: BLE001 - a page that cannot be drawn now still has its fields by name
            continue
    return out


_index: DomainIndex | None = None
_lock = threading.Lock()


def index() -> DomainIndex:
    """This process's index, built from the layouts once (on the first callback request)."""
    global _index
    with _lock:
        if _index is None:
            _index = DomainIndex(_layouts())
        return _index


def _entries(values: Any, where: str) -> Iterator[dict]:
    if not isinstance(values, list):
        raise OutOfDomain(f"the callback request's {where!r} is not a list, as every page sends it")
    for item in values:
        if isinstance(item, list):  # a pattern-matching ALL input: one entry per matching component
            yield from _entries(item, where)
        elif isinstance(item, dict) and "id" in item and isinstance(item.get("property"), str):
            yield item
        else:
            raise OutOfDomain(f"an entry of the callback request's {where!r} is not an "
                              "{id, property, value} object, as every page sends it")


def _same_id(defined: str, sent: Any) -> bool:
    """A sent id matches a defined one: equal, or for a pattern-matching id, equal on every fixed key."""
    if not defined.startswith("{"):
        return sent == defined
    pattern = json.loads(defined)
    return isinstance(sent, dict) and set(sent) == set(pattern) and all(
        isinstance(want, list) or sent.get(key) == want for key, want in pattern.items())


def _matches(defined: list[dict], sent: Any, where: str) -> None:
    """The request's inputs (or state) are the callback's own, in its order."""
    if not isinstance(sent, list) or len(sent) != len(defined):
        raise OutOfDomain(f"the callback request's {where!r} are not the {len(defined)} this callback takes")
    for want, got in zip(defined, sent, strict=True):
        items = got if isinstance(got, list) and want["id"].startswith("{") else [got]
        for item in items:
            if not (isinstance(item, dict) and item.get("property") == want["property"]
                    and _same_id(want["id"], item.get("id"))):
                raise OutOfDomain(f"the callback request's {where!r} do not match the callback: expected "
                                  f"{want['id']}.{want['property']}")


def _outputs_match(defined: Any, sent: Any) -> None:
    from dash import Output

    defined = defined if isinstance(defined, list | tuple) else [defined]
    sent = sent if isinstance(sent, list) and len(defined) > 1 else [sent]
    if len(sent) != len(defined):
        raise OutOfDomain("the callback request's outputs are not the ones this callback sets")
    for want, got in zip(defined, sent, strict=True):
        for item in (got if isinstance(got, list) else [got]):
            if not (isinstance(item, dict) and isinstance(item.get("property"), str)
                    and isinstance(item.get("id"), str | dict)
                    and Output(item["id"], item["property"].split("@")[0]) == want):
                raise OutOfDomain("the callback request's outputs are not the ones this callback sets")


def check_callback_body(body: Any, domains: DomainIndex | None = None,
                        callbacks: dict[str, dict] | None = None) -> None:
    """Refuse a callback body that no page could send (:class:`OutOfDomain` says what and why): it must
    name a callback, carry that callback's outputs, inputs and state, and every value must lie in its
    component's domain."""
    if not isinstance(body, dict):
        raise OutOfDomain("a callback request is a JSON object, as every page sends it")
    if not isinstance(body.get("output"), str):
        raise OutOfDomain("the callback request names no output (\"output\" must be text)")
    if callbacks is not None:
        spec = callbacks.get(body["output"])
        if spec is None or "callback" not in spec:  # clientside callbacks run in the browser only
            raise OutOfDomain("the callback request names no server callback of this app")
        _outputs_match(spec["output"], body.get("outputs"))
        _matches(spec["inputs"], body.get("inputs"), "inputs")
        _matches(spec.get("state", []), body.get("state", []), "state")
    domains = domains or index()
    for where in ("inputs", "state"):
        if where not in body:
            continue
        for entry in _entries(body[where], where):
            problem = domains.check(entry["id"], entry["property"])(entry.get("value"))
            if problem is not None:
                shown = json.dumps(entry.get("value"), default=str)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise OutOfDomain(f"{id_key(entry['id'])}.{entry['property']} = {shown} is not a value this "
                                  f"page sends: it takes {problem}")
