"""The tree's layering is checked, and the check catches what it promises: an import the wrong way, a cycle.

``lint-imports`` (import-linter, configured in pyproject.toml) runs in scripts/test.sh; here it runs on
the real tree (every contract kept) and on copies of it with one violating import added, each of which
must break a named contract. grimp reads imports inside functions too, so hiding one there does not help.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("whestboard", "components", "server", "pages")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(root)})


@pytest.fixture()
def copy_of_the_tree(tmp_path) -> Path:
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # the core importing a use case above it, hidden inside a function
    ("whestboard/rules/rounds.py", "def _probe():\n    from whestboard.scoring import runs  # noqa\n",
     "The domain core imports from use cases down to rules, store and configuration"),
    # two sibling modules importing each other
    ("whestboard/band/measure.py", "from whestboard.band import view  # noqa\n",
     "No import cycle between sibling modules or packages"),
    # the core reaching for Dash
    ("whestboard/data/registry.py", "import dash  # noqa\n", "The domain core never imports Dash, Flask or plotly"),
    # UI reaching into the server plumbing
    ("components/selectors.py", "from server import health  # noqa\n",
     "Pages and the server plumbing sit above the UI, the UI above the domain core"),
])
def test_a_violating_import_breaks_its_contract(copy_of_the_tree, module, line, contract):
    path = copy_of_the_tree / module
    path.write_text(path.read_text() + "\n\n" + line)
    done = _lint(copy_of_the_tree)
    assert done.returncode != 0
    assert f"{contract} BROKEN" in done.stdout, done.stdout[-3000:]


def test_nothing_imports_another_modules_private_name():
    """Public names live in a package's ``__init__`` or a module's plain names; ``_private`` stays home."""
    import ast

    found = []
    for path in [*REPO.glob("*.py"), *(p for name in (*PACKAGES, "tests", "benchmarks")
                                      for p in (REPO / name).rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] in (*PACKAGES, "app", "tests"):
                found += [f"{path.relative_to(REPO)}:{node.lineno} {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not found, found


def test_only_the_config_module_reads_the_environment():
    found = []
    for name in PACKAGES:
        for path in (REPO / name).rglob("*.py"):
            if path == REPO / "whestboard" / "config.py":
                continue
            text = path.read_text()
            found += [f"{path.relative_to(REPO)}" for needle in ("os.environ", "os.getenv") if needle in text]
    assert not found, found
