"""The grader's import rule inside a sandbox worker: participant files see only what the grader offers.

numpy, flopscope and whestbench are imported by the worker before the participant's code runs, so a
meta-path finder alone would never be asked about ``import numpy`` (the module is already in
``sys.modules``). The rule therefore sits in ``builtins.__import__`` and ``importlib.import_module``
and looks at *who* imports: a module whose file lies in the submission folder gets
``ModuleNotFoundError: No module named 'numpy'``, exactly the exception the Phase 2 grader raises;
flopscope and whestbench importing their own numpy are not affected. Modules the submission ships
(helpers, packages) stay importable; under a rule without compiled code, an extension module shipped
in the submission is refused with ``ImportError``.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import sys

from whestboard.rules.environment import GraderEnvironment


class ImportRule:
    """Decides, for one import statement, whether the grader would have satisfied it."""

    def __init__(self, environment: GraderEnvironment, submission_dir: str) -> None:
        self.environment = environment
        self.root = submission_dir.rstrip("/") + "/"
        self.refused: list[str] = []

    def from_participant(self, module_globals: dict | None) -> bool:
        origin = (module_globals or {}).get("__file__")
        return isinstance(origin, str) and origin.startswith(self.root)

    def ships(self, top_level: str) -> bool:
        """Whether the submission itself provides ``top_level`` (a helper module or package)."""
        module = sys.modules.get(top_level)
        if module is not None:
            return str(getattr(module, "__file__", "") or "").startswith(self.root)
        spec = importlib.machinery.PathFinder.find_spec(top_level, [self.root.rstrip("/")])
        return spec is not None

    def check(self, name: str, level: int) -> None:
        """Raise what the grader would raise for a participant's ``import name``; return if it is fine."""
        if level or not name:
            return
        top_level = name.partition(".")[0]
        if self.ships(top_level):
            self._check_compiled(top_level)
            return
        if self.environment.may_import(top_level):
            return
        self.refused.append(top_level)
        raise ModuleNotFoundError(f"No module named '{top_level}'", name=top_level)

    def _check_compiled(self, top_level: str) -> None:
        if self.environment.compiled_code_allowed or top_level in sys.modules:
            return
        spec = importlib.machinery.PathFinder.find_spec(top_level, [self.root.rstrip("/")])
        origin = getattr(spec, "origin", None) or ""
        if origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            raise ImportError(f"{top_level} is compiled code ({origin.rsplit('/', 1)[-1]}); "
                              f"{self.environment.rule}", name=top_level)


def install(environment: GraderEnvironment, submission_dir: str) -> ImportRule | None:
    """Apply ``environment``'s rule to every import made from ``submission_dir``; None when nothing is refused."""
    if not environment.restricted:
        return None
    rule = ImportRule(environment, submission_dir)
    original_import = builtins.__import__
    original_import_module = importlib.import_module

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - __import__'s names
        caller = globals if globals is not None else sys._getframe(1).f_globals
        if rule.from_participant(caller):
            rule.check(name, level)
        return original_import(name, globals, locals, fromlist, level)

    def guarded_import_module(name, package=None):
        if rule.from_participant(sys._getframe(1).f_globals):
            rule.check(name, 1 if name.startswith(".") else 0)
        return original_import_module(name, package)

    builtins.__import__ = guarded_import
    importlib.import_module = guarded_import_module
    return rule
