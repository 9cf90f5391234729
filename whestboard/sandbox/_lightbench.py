"""``import whestbench`` for the sandbox's fork server, without Hugging Face ``datasets`` until it is asked for.

whestbench's package ``__init__`` imports its dataset module, hence ``datasets``, pandas and
pyarrow (about 2 s of CPU, most of ``import whestbench``); an estimator needs none of them. Any
``import whestbench.<module>`` runs that ``__init__`` first, so importing only the submodules a
worker needs does not avoid it. This module installs the real package (its own spec, ``__path__``
and ``__all__``, nothing of whestbench patched) before anything imports it, imports the
submodules a worker uses, and binds the names of the package's face that come from them
(``BaseEstimator``, ``SetupContext``, ``MLP``, the simulation helpers, the scoring warnings). The
first use of any other name (``whestbench.load_dataset``, ``from whestbench import *``) runs
whestbench's own ``__init__`` in the package, which imports ``datasets`` then and binds every
name as usual. So a worker sees the same ``whestbench``, only the dataset half arrives on demand.

It must run before any other module imports whestbench, hence before ``whestboard.sandbox``'s
own ``__init__``: the fork server's bootstrap loads this file by its path
(:func:`whestboard.sandbox._host._fork_server_command`). It imports nothing of whestboard.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

#: Names of whestbench's package face that a worker binds at once, by the submodule that defines them.
LIGHT_NAMES = {
    "sdk": ("BaseEstimator", "SetupContext"),
    "domain": ("MLP",),
    "generation": ("sample_mlp",),
    "simulation": ("relu", "run_mlp", "run_mlp_all_layers", "sample_layer_statistics"),
    "scoring": ("BudgetExhaustionWarning", "CombinedBudgetExhaustionWarning", "ResidualWallTimeExhaustionWarning",
                "ScoringExhaustionWarning", "TimeExhaustionWarning"),
}
#: The other submodules every worker imports (the reference estimators, the loader, the worker's checks).
LIGHT_MODULES = ("estimators", "loader", "runner", "subprocess_worker")


def install() -> bool:
    """Put the light ``whestbench`` in ``sys.modules``; False (nothing changed) if whestbench is imported
    already, cannot be found, or its light half turns out to need ``datasets`` after all."""
    if "whestbench" in sys.modules:
        return False
    spec = importlib.util.find_spec("whestbench")
    if spec is None or spec.loader is None or not spec.submodule_search_locations or not spec.origin:
        return False
    package = importlib.util.module_from_spec(spec)
    package.__all__ = _declared_all(Path(spec.origin))
    sys.modules["whestbench"] = package
    try:
        for name, names in LIGHT_NAMES.items():
            module = importlib.import_module(f"whestbench.{name}")
            for attribute in names:
                setattr(package, attribute, getattr(module, attribute))
        for name in LIGHT_MODULES:
            importlib.import_module(f"whestbench.{name}")
    except BaseException:
        _complete(package, spec)
        raise
    if "datasets" in sys.modules:  # a whestbench whose light half is heavy: nothing to save, be the real one
        _complete(package, spec)
        return False
    package.__getattr__ = lambda name: _on_demand(package, spec, name)
    return True


def _declared_all(init: Path) -> list[str]:
    """The package's ``__all__`` as its ``__init__`` declares it (read, not run)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _on_demand(package, spec, name: str):
    """A name the light package has not bound: run whestbench's own ``__init__`` now, then look again."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module 'whestbench' has no attribute {name!r}")
    _complete(package, spec)
    return getattr(package, name)


def _complete(package, spec) -> None:
    package.__dict__.pop("__getattr__", None)
    spec.loader.exec_module(package)
