"""Is the meter still the meter? What the worker sees of code that makes flopscope count less.

The grader bills what flopscope counts, and flopscope is plain Python in the estimator's own process:
code can reset the active budget's counter, patch its charging function, swap the active budget,
reach raw numpy (``sys.modules["numpy"]``) where the round offers none, or do its arithmetic in a
shared library called through ctypes. ``whest run`` is fooled by all of these. The worker does not
change the verdict (the score stays the grader's); it reports, per MLP, ``meter_tampering``: None
when nothing was seen, else one sentence naming what was.

Signals, each chosen because honest code cannot raise it:

* **flopscope changed.** Before the participant's first line runs, every function and class member
  of every loaded ``flopscope`` module is recorded; after each predict any that differs is named.
  A function's code replaced in place (``f.__code__ = ...``) is caught as it happens, by an audit
  hook (``object.__setattr__``), which no Python code can remove.
* **The counter disagrees with its own log.** ``flops_used`` must equal the sum of the FLOPs of the
  operations flopscope logged in the budget (they are the same numbers, added in the same call), and
  the log only grows.
* **Another budget was charged.** The budget active at the end of predict must be the grader's, and
  no other ``BudgetContext`` (the process's default one, or one made during predict) may gain FLOPs
  while predict runs.
* **Work hidden inside a metered call.** A single flopscope call that took at least HIDDEN_WORK_MIN_S
  (backend plus flopscope's overhead, neither of which is residual time) for fewer than
  HIDDEN_WORK_FLOPS_PER_S FLOPs per second: honest calls, even pure data movement (copy, sort, take
  over 16M elements), bill 10^8 FLOPs per second or more, so this is time spent in code the call ran
  on the participant's behalf (an ``__array__`` hook doing numpy work the meter does not see).
* **Raw numpy where the round has none.** Under a rule without numpy, a numpy module or a numpy
  function flopscope.numpy does not offer, held in the participant's modules or on the estimator.
* **Foreign functions.** Every foreign function the participant's code looks up through ctypes
  during load, setup or predict (the ``ctypes.dlsym`` audit event: CPython raises none per call, and
  a looked-up function stays held, so the finding stands for every later MLP), and shared libraries
  loaded from the submission or its scratch folders (``ctypes.dlopen``). Look-ups by the worker
  itself or by threadpoolctl (thread counts, not arithmetic) are not counted.

What cannot be seen is stated in docs/uploads.md ("The meter's integrity").
"""

from __future__ import annotations

import os
import sys
import types
import weakref
from dataclasses import dataclass, field

#: A metered call is "hiding work" when it took this long (flopscope's own share is microseconds per call;
#: this leaves room for a lazy import inside flopscope on a loaded machine) ...
HIDDEN_WORK_MIN_S = 0.5
#: ... for fewer FLOPs per backend second than this (honest calls bill >= 1e8 per second).
HIDDEN_WORK_FLOPS_PER_S = 1e6
#: Packages whose own ctypes look-ups are housekeeping, not arithmetic (the worker's memory maps, thread counts).
HOUSEKEEPING_MODULES = ("whestboard", "threadpoolctl")
#: How many distinct findings one sentence names before "and N more", and the sentence's longest form
#: (the leaderboard stores it in a 500-character column).
MAX_NAMED = 3
MAX_SENTENCE_CHARS = 480

_WATCH: MeterWatch | None = None
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    """The process's audit hook: cheap when not recording; never raises into the code it watches."""
    watch = _WATCH
    if watch is None or not watch.recording:
        return
    try:
        if event.startswith("ctypes."):
            watch.on_ctypes(event, args)
        elif event in ("object.__setattr__", "object.__delattr__"):
            watch.on_setattr(args)
    except Exception:  # noqa: BLE001 - an audit hook that raised would break the estimator's call
        pass


@dataclass
class _Seen:
    """Findings, in the order seen, with the phase (load, setup, predict) each was seen in."""

    items: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, sentence: str) -> None:
        self.items.setdefault(key, sentence)


class MeterWatch:
    """One worker's watch on flopscope: installed before the estimator loads, consulted around each predict."""

    def __init__(self, participant_roots: tuple[str, ...], *, numpy_offered: bool) -> None:
        self.roots = tuple(os.path.realpath(r).rstrip("/") + "/" for r in participant_roots if r)
        #: The Python installation the worker runs from: never the participant's, even where it lies under a
        #: participant root (a checkout under /tmp, whose /tmp is the worker's scratch space).
        self.installed = tuple(sorted({os.path.realpath(p).rstrip("/") + "/"
                                       for p in (sys.prefix, sys.exec_prefix, sys.base_prefix) if p}))
        self._preloaded: set[int] = set()
        self.numpy_offered = numpy_offered
        self.recording = False
        self.phase = "load"
        self.standing = _Seen()  # seen during load or setup: they affect every MLP
        self.current = _Seen()
        self._baseline: dict[tuple[str, str], object] = {}
        self._created: list = []
        self._budget_module = None

    # -- installation ----------------------------------------------------------------------

    def install(self) -> None:
        """Record flopscope as it is now and start watching (call before the participant's code runs)."""
        global _WATCH, _HOOKED
        from whestboard.rules import budget_module

        flopscope_budget = budget_module()
        self._budget_module = flopscope_budget
        self._thread_local = flopscope_budget._thread_local
        self._contexts = flopscope_budget._all_budget_contexts
        self._watch_new_budgets(flopscope_budget)
        self._baseline = _flopscope_snapshot()
        self._preloaded = {id(module) for module in list(sys.modules.values())}
        self._numpy_offered_ids = _flopscope_numpy_ids()
        _WATCH = self
        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED = True
        self.recording = True

    def _watch_new_budgets(self, budget_module) -> None:
        """Keep every BudgetContext made while participant code runs alive, to read its counter afterwards."""
        created = self._created
        watch = self

        class _Contexts(weakref.WeakSet):
            def add(self, item) -> None:  # noqa: D102 - flopscope registers each new context here
                if watch.recording:
                    created.append(item)
                super().add(item)

        contexts = _Contexts()
        for ctx in list(budget_module._all_budget_contexts):
            contexts.add(ctx)
        budget_module._all_budget_contexts = self._contexts = contexts

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.recording = True

    def pause(self) -> None:
        self.recording = False

    def participant_path(self, path: str) -> bool:
        """Whether a file is the participant's: under one of its roots, and not part of the installation."""
        return path.startswith(self.roots) and not path.startswith(self.installed)

    def participant_modules(self):
        """Modules the participant's code loaded: files of its own, imported after the watch was installed."""
        for module in list(sys.modules.values()):
            origin = getattr(module, "__file__", None) or ""
            if id(module) not in self._preloaded and isinstance(origin, str) and self.participant_path(origin):
                yield module, origin

    # -- audit events ----------------------------------------------------------------------

    def _findings(self) -> _Seen:
        return self.current if self.phase == "predict" else self.standing

    def on_ctypes(self, event: str, args: tuple) -> None:
        if event == "ctypes.dlopen":
            name = str(args[0]) if args and args[0] is not None else ""
            path = os.path.realpath(name) if name.startswith(("/", ".")) else name
            if self.participant_path(path):
                self.standing.add(f"dlopen:{path}", f"loaded its own shared library {os.path.basename(path)} "
                                                    f"through ctypes during {self.phase}")
        elif event == "ctypes.dlsym" and len(args) > 1 and isinstance(args[1], str):
            if _housekeeping(sys._getframe(2)):
                return
            library = os.path.basename(str(getattr(args[0], "_name", "") or "the process"))
            self.standing.add(f"dlsym:{library}:{args[1]}", f"looked up the foreign function {args[1]} in "
                                                           f"{library} through ctypes during {self.phase}")

    def on_setattr(self, args: tuple) -> None:
        target, name = args[0], args[1]
        if _code_file(sys._getframe(2)).startswith(_library_dirs()):
            return  # the libraries' own lazy set-up, not the participant's
        owner = getattr(target, "__module__", None) or ""
        if isinstance(owner, str) and (owner == "flopscope" or owner.startswith("flopscope.")):
            label = f"{owner}.{getattr(target, '__qualname__', type(target).__name__)}.{name}"
            self._findings().add(f"set:{label}", f"{label} was changed during {self.phase}")

    # -- around predict --------------------------------------------------------------------

    def begin_predict(self, budget_ctx) -> None:
        """Called just before the metered window opens: what every other budget has counted so far."""
        self.current = _Seen()
        self._created.clear()
        self._others = {id(ctx): (ctx, ctx._flops_used) for ctx in list(self._contexts) if ctx is not budget_ctx}
        self._charged_elsewhere: int | None = None
        self.phase = "predict"
        self.recording = True

    def check_active(self, budget_ctx) -> None:
        """Inside the window, after the estimator returned: is the grader's budget still the active one?

        Never raises (an exception here would become the estimator's failure)."""
        try:
            self._charged_elsewhere = self._elsewhere(budget_ctx)  # before the worker's checks bill the default
        except Exception:  # noqa: BLE001 - records too broken to read: finish_predict names that
            self._charged_elsewhere = None
        active = getattr(self._thread_local, "active_budget", None)
        if getattr(self._budget_module, "_thread_local", None) is not self._thread_local:
            self.current.add("thread_local", "flopscope's per-thread budget store was replaced")
        elif active is not budget_ctx:
            self.current.add("swapped", "the active budget at the end of predict was not the grader's: "
                                        "work was charged elsewhere")

    def finish_predict(self, budget_ctx, estimator) -> str | None:
        """After the window: every check; one sentence naming what was seen, or None. Never raises: the
        grader's verdict must not depend on the watch (state too broken to read is itself named)."""
        self.recording = False
        self.phase = "after"
        try:
            return self._verdict(budget_ctx, estimator)
        except Exception as exc:  # noqa: BLE001 - flopscope's own records no longer have their shape
            return sentence_of(_Seen({"unreadable": f"flopscope's budget records could not be read after "
                                                    f"predict ({type(exc).__name__}): they were altered"}))

    def _verdict(self, budget_ctx, estimator) -> str | None:
        seen = _Seen(dict(self.standing.items))
        for key, sentence in self.current.items.items():
            seen.add(key, sentence)
        for key, sentence in self._flopscope_changes():
            seen.add(key, sentence)
        for key, sentence in self._counter_checks(budget_ctx):
            seen.add(key, sentence)
        for key, sentence in self._other_budgets(budget_ctx):
            seen.add(key, sentence)
        for key, sentence in _hidden_work(budget_ctx):
            seen.add(key, sentence)
        if not self.numpy_offered:
            for key, sentence in self._raw_numpy(estimator):
                seen.add(key, sentence)
        if any(key.startswith("dlsym:") for key in seen.items):
            seen.add("foreign", "calls to foreign functions are work the meter does not see")
        return sentence_of(seen)

    def _flopscope_changes(self):
        now = _flopscope_snapshot()
        changed = [label for label, value in self._baseline.items() if now.get(label, _MISSING) is not value]
        if changed:
            names = [".".join(part for part in label if part) for label in changed]
            yield "patched", _listed("flopscope was changed: ", names, " replaced or removed")

    def _counter_checks(self, budget_ctx):
        log = budget_ctx._op_log
        logged = sum(int(record.flop_cost) for record in log)
        counted = int(budget_ctx._flops_used)
        if counted != logged:
            yield "counter", (f"the budget's counter says {counted:,} FLOPs but flopscope logged {logged:,} "
                              "for the operations run: the counter was reset or rewritten")
        elif log and int(log[-1].cumulative) != counted:
            yield "counter", "the budget's running total disagrees with its last logged operation"

    def _elsewhere(self, budget_ctx) -> int:
        """FLOPs charged since predict began to any budget but the grader's (the default one, or one made since)."""
        gained = 0
        for ctx, before in self._others.values():
            gained += max(0, int(ctx._flops_used) - int(before))
        for ctx in self._created:
            if ctx is not budget_ctx:
                gained += max(0, int(ctx._flops_used), sum(int(r.flop_cost) for r in ctx._op_log))
        return gained

    def _other_budgets(self, budget_ctx):
        gained = self._charged_elsewhere if self._charged_elsewhere is not None else self._elsewhere(budget_ctx)
        if gained:
            yield "other_budget", f"a budget other than the grader's was charged {gained:,} FLOPs"

    def _raw_numpy(self, estimator):
        held = []
        for where, value in _participant_values(estimator, self.participant_modules(), self.roots):
            if _is_raw_numpy(value, self._numpy_offered_ids):
                held.append(f"{where} ({_numpy_name(value)})")
        if held:
            yield "raw_numpy", _listed("raw numpy, which this round does not offer, was reached and held in ",
                                       held, "")


_MISSING = object()


def _code_file(frame) -> str:
    return frame.f_code.co_filename if frame is not None else ""


def _package_dir(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    origin = getattr(module, "__file__", None)
    return os.path.dirname(os.path.realpath(origin)) + "/" if origin else None


def _library_dirs() -> tuple[str, ...]:
    """Where flopscope, whestbench and numpy live: code there setting their attributes is their own."""
    return tuple(d for d in map(_package_dir, ("flopscope", "whestbench", "numpy")) if d)


def _housekeeping(frame) -> bool:
    """Whether the Python code asking ctypes for a function is the worker's or a thread-count library's."""
    ctypes_dir = _package_dir("ctypes") or "\0"
    while frame is not None and _code_file(frame).startswith(ctypes_dir):
        frame = frame.f_back
    if frame is None:
        return False
    filename = os.path.realpath(_code_file(frame))
    return filename.startswith(tuple(d for d in map(_package_dir, HOUSEKEEPING_MODULES) if d)) or (
        os.path.basename(filename) == "weakref.py" and filename.startswith(os.path.realpath(sys.base_prefix)))


def _flopscope_snapshot() -> dict[tuple[str, str], object]:
    """Every function and class member of the loaded flopscope modules, by where it lives.

    Code objects are not read here (each read is an audit event, 4,000 of them per predict): a function's
    ``__code__`` replaced in place is caught as it happens, by the audit hook.
    """
    snapshot: dict[tuple[str, str], object] = {}
    for module_name, module in list(sys.modules.items()):
        if not (module_name == "flopscope" or module_name.startswith("flopscope.")) or module is None:
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, types.ModuleType) or not callable(value):
                continue
            snapshot[(module_name, name)] = value
            if isinstance(value, type) and value.__dict__.get("__module__") == module_name:
                for member, attribute in list(vars(value).items()):
                    if member.startswith("__") and member not in ("__init__", "__enter__", "__exit__"):
                        continue
                    snapshot[(module_name, f"{name}.{member}")] = attribute
    return snapshot


def _flopscope_numpy_ids() -> set[int]:
    """What flopscope.numpy itself offers (numpy's dtypes, errstate, finfo ...): holding these is honest."""
    import flopscope.numpy as fnp

    offered = {id(fnp)}
    for name, value in vars(fnp).items():
        if name.startswith("_"):
            continue  # its private names hold numpy itself
        offered.add(id(value))
        if isinstance(value, types.ModuleType) and value.__name__.startswith("flopscope"):
            offered.update(id(v) for v in vars(value).values())
    return offered


def _hidden_work(budget_ctx):
    """A call that took far longer than its FLOPs explain: flopscope times the participant's conversion hooks
    (``__array__``) as its own overhead or backend time, and neither is residual time."""
    for record in budget_ctx._op_log:
        seconds = (record.flopscope_backend_duration_s or 0.0) + (record.flopscope_overhead_duration_s or 0.0)
        if seconds >= HIDDEN_WORK_MIN_S and record.flop_cost < HIDDEN_WORK_FLOPS_PER_S * seconds:
            yield "hidden", (f"the metered call {record.op_name} took {seconds:.2f} s for "
                             f"{int(record.flop_cost):,} FLOPs: work done inside it (the participant's "
                             "conversion hooks) was not counted")
            return


def _participant_values(estimator, modules, roots: tuple[str, ...]):
    """(where, value) for the participant's module globals and the estimator's attributes, one level deep."""
    for module, origin in modules:
        shown = _relative(origin, roots)
        for name, value in list(vars(module).items()):
            yield from _one_level(f"{shown}'s {name}", value)
    for owner, label in ((estimator, "the estimator"), (type(estimator), "the estimator's class")):
        for name, value in list(getattr(owner, "__dict__", {}).items()):
            yield from _one_level(f"{label}'s {name}", value)


def _relative(path: str, roots: tuple[str, ...]) -> str:
    root = next(r for r in roots if path.startswith(r))
    return path[len(root):]


def _one_level(where: str, value):
    yield where, value
    if isinstance(value, dict):
        items = list(value.values())[:256]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)[:256]
    else:
        return
    for item in items:
        yield where, item


def _is_raw_numpy(value, offered: set[int]) -> bool:
    if id(value) in offered:
        return False
    if isinstance(value, types.ModuleType):
        return value.__name__ == "numpy" or value.__name__.startswith("numpy.")
    if not callable(value) or isinstance(value, type):
        return False
    module = getattr(value, "__module__", None)
    if type(value).__name__ == "ufunc":
        return True
    return isinstance(module, str) and (module == "numpy" or module.startswith("numpy."))


def _numpy_name(value) -> str:
    return getattr(value, "__name__", None) or type(value).__name__


def _listed(prefix: str, names: list[str], suffix: str) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return f"{prefix}{shown}{more}{suffix}"


def sentence_of(seen: _Seen) -> str | None:
    """One sentence: the findings joined, the first capitalised, or None when nothing was seen."""
    parts = list(seen.items.values())
    if not parts:
        return None
    text = "".join(c if c.isprintable() else "?" for c in "; ".join(parts))  # names come from the participant
    if len(text) >= MAX_SENTENCE_CHARS:
        text = text[:MAX_SENTENCE_CHARS - 4].rstrip() + " ..."
    return text[0].upper() + text[1:] + "."
