"""The app's plotly.js bundle draws every trace type the app builds, and is the bundle it claims to be.

``assets/plotly-whestboard.min.js`` holds only some trace modules (``scripts/build_plotly_bundle.sh``). A figure
whose trace type is not among them is not drawn at all, so a figure builder that starts using a new type
must fail here until the bundle is rebuilt with it. The types the app builds are collected from the source
of every module that can build a figure (``go.<Trace>(``, ``fig.add_<trace>(``, ``{"type": "<trace>"}``);
the types the bundle registers are read from the bundle itself. The browser test
``tests/server/test_wire_browser.py`` checks the same at run time: every graph drawn on every page has
only types the loaded bundle registered.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from plotly.basedatatypes import BaseTraceType
from plotly.offline import get_plotlyjs_version

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "assets" / "plotly-whestboard.min.js"
LOADER = REPO / "assets" / "plotly_loader.js"
SHA_NOTE = REPO / "scripts" / "plotly_bundle" / "bundle.sha256"
#: Where figures are built: the figure builders, the UI around them, the pages, the app and its server.
FIGURE_SOURCES = ("components", "pages", "server", "app.py")

#: Every plotly trace type by name, and the graph_objects class of each (go.Scatter -> "scatter").
TRACE_CLASSES = {name: cls for name in dir(go) if isinstance(cls := getattr(go, name), type)
                 and issubclass(cls, BaseTraceType)}
TRACE_TYPES = {cls().type for cls in TRACE_CLASSES.values()}


def bundle_traces(text: str) -> set[str]:
    """Trace types a plotly.js bundle registers: each trace module declares ``moduleType: 'trace', name``."""
    return set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', text))


def _graph_objects_names(tree: ast.AST) -> tuple[set[str], dict[str, str]]:
    """Names bound to ``plotly.graph_objects`` in a module, and names bound to its trace classes."""
    modules: set[str] = set()
    classes: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "plotly.graph_objects"}
        elif isinstance(node, ast.ImportFrom) and node.module == "plotly":
            modules |= {a.asname or a.name for a in node.names if a.name == "graph_objects"}
        elif isinstance(node, ast.ImportFrom) and node.module == "plotly.graph_objects":
            classes |= {a.asname or a.name: a.name for a in node.names if a.name in TRACE_CLASSES}
    return modules, classes


def source_trace_types(source: str) -> set[str]:
    """Trace types a Python module can build: ``go.X(...)``, ``fig.add_x(...)``, dicts with ``type`` a trace."""
    tree = ast.parse(source)
    modules, classes = _graph_objects_names(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules \
                    and name in TRACE_CLASSES:
                found.add(TRACE_CLASSES[name]().type)
            elif isinstance(func, ast.Name) and name in classes:
                found.add(TRACE_CLASSES[classes[name]]().type)
            elif name.startswith("add_") and name[4:] in TRACE_TYPES:
                found.add(name[4:])
            elif name == "dict":
                found |= {kw.value.value for kw in node.keywords
                          if kw.arg == "type" and isinstance(kw.value, ast.Constant) and kw.value.value in TRACE_TYPES}
        elif isinstance(node, ast.Dict):
            found |= {v.value for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value == "type"
                      and isinstance(v, ast.Constant) and v.value in TRACE_TYPES}
    return found


def _figure_modules() -> list[Path]:
    paths: list[Path] = []
    for entry in FIGURE_SOURCES:
        path = REPO / entry
        paths += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return paths


def app_trace_types() -> dict[str, set[str]]:
    """Trace type -> the modules that build it, over every module that can build a figure."""
    where: dict[str, set[str]] = {}
    for path in _figure_modules():
        source = path.read_text()
        assert "plotly.express" not in source, (
            f"{path.relative_to(REPO)} uses plotly.express, whose trace types this test cannot read from the "
            "source: build the figure with graph_objects, or teach source_trace_types the express function")
        for kind in source_trace_types(source):
            where.setdefault(kind, set()).add(str(path.relative_to(REPO)))
    return where


def missing_from_bundle(used: dict[str, set[str]], registered: set[str]) -> dict[str, set[str]]:
    return {kind: modules for kind, modules in used.items() if kind not in registered}


@pytest.fixture(scope="module")
def bundle_text() -> str:
    return BUNDLE.read_text()


def test_the_bundle_draws_every_trace_type_the_app_builds(bundle_text):
    used = app_trace_types()
    assert {"scatter", "scattergl", "bar", "box", "heatmap"} <= set(used), f"collected only {sorted(used)}"
    missing = missing_from_bundle(used, bundle_traces(bundle_text))
    assert not missing, (
        "figures use trace types the plotly.js bundle does not hold (they would not be drawn): "
        + "; ".join(f"{kind} in {', '.join(sorted(mods))}" for kind, mods in sorted(missing.items()))
        + ". Add them to TRACES in scripts/build_plotly_bundle.sh and run it.")


def test_a_figure_with_a_trace_type_outside_the_bundle_is_caught(bundle_text):
    source = (
        "import plotly.graph_objects as go\n"
        "from plotly.graph_objects import Funnel as F\n"
        "from dash import html\n"
        "def spread(values):\n"
        "    fig = go.Figure(go.Violin(y=values))\n"
        "    fig.add_trace(F(y=values))\n"
        "    html.Table([])  # a Dash component, not go.Table\n"
        "    fig.add_scatter(y=values)\n"
        "    fig.add_trace({'type': 'sankey', 'node': {}})\n"
        "    return fig\n"
    )
    used = {kind: {"figures/spread.py"} for kind in source_trace_types(source)}
    assert set(used) == {"violin", "funnel", "scatter", "sankey"}
    assert set(missing_from_bundle(used, bundle_traces(bundle_text))) == {"violin", "funnel", "sankey"}


def test_the_bundle_registers_only_the_traces_its_header_names(bundle_text):
    header = re.search(r"\* traces: ([a-z0-9, ]+)\n", bundle_text[:600])
    assert header, "the bundle's header does not name its traces: rebuild it with scripts/build_plotly_bundle.sh"
    assert bundle_traces(bundle_text) == set(header.group(1).replace(" ", "").split(","))
    assert bundle_traces(bundle_text) < TRACE_TYPES


def test_the_bundle_is_the_plotly_js_version_plotly_py_ships_and_the_recorded_build(bundle_text):
    assert f"plotly.js (whestboard - minified) v{get_plotlyjs_version()}\n" in bundle_text[:200]
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
    assert SHA_NOTE.read_text().split()[0] == digest, "the bundle changed without scripts/build_plotly_bundle.sh"
    # the loader's address names this build, so a browser holding an older bundle asks for the new one
    assert f"var version = '{digest[:12]}';" in LOADER.read_text()
