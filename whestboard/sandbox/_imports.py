"""The grader's import rule inside a sandbox worker: participant code sees only what the grader offers.

numpy, flopscope and whestbench are imported by the worker before the participant's code runs, so a
meta-path finder alone would never be asked about ``import numpy`` (the module is already in
``sys.modules``). The rule therefore sits in ``builtins.__import__`` and ``importlib.import_module``
and judges only the imports the participant's code *makes*:

- an ``import`` statement, ``__import__(...)`` or ``importlib.import_module(...)`` executed by a frame
  of a file in the submission folder gets ``ModuleNotFoundError: No module named 'numpy'``, exactly
  the exception the Phase 2 grader raises;
- imports made on the participant's behalf are never judged: by flopscope's or whestbench's Python
  code (their frames are theirs), and by C code (numpy's ``str(dtype)``, ``arr.mean()``, printing,
  unpickling), which calls ``PyImport_Import``. That C function passes the *current frame's* globals
  (often the participant's) with ``locals is globals``, an empty *list* as ``fromlist`` and level 0;
  an ``import`` statement passes ``None`` or a tuple, so the two are told apart by the call itself;
- what the participant puts in ``sys.modules`` under a name the grader lacks (the no-numpy fallback
  ``sys.modules["numpy"] = flopscope.numpy``) is what *its* later imports get, as in a Python
  without numpy; the worker's own entry is put back at once, so flopscope, whestbench and the
  worker keep the real numpy (the worker also holds its references from before the participant ran);
- modules the submission provides are the participant's and load: files in its folder, and modules
  its own meta-path finders (those added after the rule was installed) find. Under a rule without
  compiled code, an extension module shipped in the submission is refused with ``ImportError``.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import sys
from contextlib import contextmanager
from types import FrameType, ModuleType

from whestboard.rules import GraderEnvironment

_ABSENT = object()  # a participant's ``del sys.modules[name]``


def made_by_c_code(module_globals: dict | None, module_locals: object, fromlist: object, level: int) -> bool:
    """Whether an ``__import__`` call has the arguments ``PyImport_Import`` passes (C code importing)."""
    return (type(fromlist) is list and not fromlist and level == 0
            and module_globals is not None and module_locals is module_globals)


class ImportRule:
    """Decides, for one import the participant makes, whether the grader would have satisfied it."""

    def __init__(self, environment: GraderEnvironment, submission_dir: str) -> None:
        self.environment = environment
        self.root = submission_dir.rstrip("/") + "/"
        self.refused: list[str] = []
        #: Modules the grader lacks that the worker loaded: what flopscope, whestbench and the worker use.
        self.originals: dict[str, ModuleType] = {
            name: module for name, module in sys.modules.items()
            if "." not in name and not name.startswith("__") and not environment.may_import(name)
        }
        #: What the participant put in ``sys.modules`` under those names: what its own imports get.
        self.aliases: dict[str, object] = {}
        self.system_finders = list(sys.meta_path)

    # -- who imports -------------------------------------------------------------------------------------

    def in_submission(self, path: object) -> bool:
        return isinstance(path, str) and path.startswith(self.root)

    def from_participant(self, frame: FrameType | None) -> bool:
        """Whether ``frame`` runs a file of the submission (its code or its module globals say so)."""
        if frame is None:
            return False
        return self.in_submission(frame.f_code.co_filename) or self.in_submission(frame.f_globals.get("__file__"))

    # -- the participant's sys.modules ---------------------------------------------------------------------

    def reclaim(self) -> None:
        """Move what the participant stored under the worker's names into its aliases; restore the worker's."""
        modules = sys.modules
        for name, original in self.originals.items():
            current = modules.get(name, _ABSENT)
            if current is not original:
                self.aliases[name] = current
                modules[name] = original

    @contextmanager
    def participant_view(self):
        """``sys.modules`` as the participant left it, for the length of one of its imports.

        Under an aliased name the worker's entries (``numpy`` and its submodules) are hidden, as in a
        Python without numpy, and what the import adds there is kept as the participant's.
        """
        if not self.aliases:
            yield
            return
        modules = sys.modules
        tops = {name.partition(".")[0] for name in self.aliases}
        workers = {name: modules.pop(name) for name in [n for n in modules if n.partition(".")[0] in tops]}
        modules.update({name: alias for name, alias in self.aliases.items() if alias is not _ABSENT})
        try:
            yield
        finally:
            for name in [n for n in modules if n.partition(".")[0] in tops]:
                self.aliases[name] = modules.pop(name)
            modules.update(workers)

    # -- what the submission provides ----------------------------------------------------------------------

    def ships(self, top_level: str) -> bool:
        """Whether the submission itself provides ``top_level``: a file of its folder or its own finder's."""
        module = sys.modules.get(top_level)
        if module is not None and module is not self.originals.get(top_level):
            return self.in_submission(getattr(module, "__file__", None)) or self._participant_object(
                getattr(getattr(module, "__spec__", None), "loader", None))
        if importlib.machinery.PathFinder.find_spec(top_level, [self.root.rstrip("/")]) is not None:
            return True
        return any(self._finds(finder, top_level) for finder in self.participant_finders())

    def participant_finders(self) -> list:
        return [f for f in sys.meta_path if not any(f is known for known in self.system_finders)]

    def _participant_object(self, obj: object) -> bool:
        if obj is None:
            return False
        if any(obj is finder for finder in self.participant_finders()):
            return True
        module = sys.modules.get(getattr(type(obj), "__module__", "") or "")
        return self.in_submission(getattr(module, "__file__", None))

    @staticmethod
    def _finds(finder: object, name: str) -> bool:
        find_spec = getattr(finder, "find_spec", None)
        try:
            return find_spec is not None and find_spec(name, None) is not None
        except Exception:  # noqa: BLE001 - a participant's finder failing on a name it does not know
            return False

    # -- the rule ---------------------------------------------------------------------------------------

    def check(self, name: str, level: int) -> None:
        """Raise what the grader would raise for a participant's ``import name``; return if it is fine."""
        if level or not name:
            return
        top_level = name.partition(".")[0]
        if self.aliases.get(top_level, _ABSENT) is not _ABSENT:
            return  # the participant's own ``sys.modules[top_level] = ...``, as a Python without it would
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
        rule.reclaim()
        if made_by_c_code(globals, locals, fromlist, level) or not rule.from_participant(sys._getframe(1)):
            return original_import(name, globals, locals, fromlist, level)
        rule.check(name, level)
        alias = rule.aliases.get(name, _ABSENT) if not level else _ABSENT
        if alias is not _ABSENT and all(hasattr(alias, item) for item in fromlist or ()):
            return alias  # `import numpy as np` under the participant's alias: what sys.modules would give
        with rule.participant_view():
            return original_import(name, globals, locals, fromlist, level)

    def guarded_import_module(name, package=None):
        rule.reclaim()
        if not rule.from_participant(sys._getframe(1)):
            return original_import_module(name, package)
        rule.check(name, 1 if name.startswith(".") else 0)
        with rule.participant_view():
            return original_import_module(name, package)

    builtins.__import__ = guarded_import
    importlib.import_module = guarded_import_module
    return rule
