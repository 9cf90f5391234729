"""What a page asks the scoring core for, parsed once into one typed request: a lab run, a budget sweep.

A page builds the request from its form; the background job it launches carries the request's
``payload()`` (plain JSON) and reads it back through the same parser, so the web worker that priced it
and the process that runs it see one request, and a hand-made payload (any store value, any job input)
gets the sentence a person typing it would get. A request is bounded before anything is built: the
dataset is one the app serves, the MLP selection and budget go through ``scoring.inputs``, the estimators
through ``scoring.served`` (never a path, at most ``MAX_SPECS`` of them) and the ladder through
``parse_budget_ladder``. Its price (``cost``) is the one cost rule: MLPs times each one's FLOP budget,
points already stored cost nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from whestboard.data import get_dataset
from whestboard.scoring._curve import curve_cost, curve_requests, parse_budget_ladder
from whestboard.scoring._inputs import RunError, parse_budget, quoted, select_mlps
from whestboard.scoring._rulebook import rulebook_for
from whestboard.scoring._runs import RunRequest, cache_key
from whestboard.scoring._served import served_handle, served_spec, served_specs

#: Why the lab and the budget curves refuse an upload: they run their menus; uploads run on the Upload page.
MENU_ONLY = ("this page runs the estimators of its menu; an uploaded estimator is scored on the Upload page, "
             "one at a time in the sandbox queue")


def _dataset(key: object):
    if not isinstance(key, str) or not key.strip() or len(key) > 300:
        raise RunError(f"dataset {quoted(key)} is not a dataset key: pick one above")
    return get_dataset(key)


def _text(value: object, what: str) -> str:
    """A form field as text (empty for None); a number is written out, anything else is refused."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RunError(f"{what} {quoted(value)} is not text")
    return value if isinstance(value, str) else repr(value)


def _mapping(values: object, what: str) -> Mapping:
    if not isinstance(values, Mapping):
        raise RunError(f"{what} {quoted(values)} is not a request this page sends; reload the page")
    return values


@dataclass(frozen=True)
class LabRun:
    """One lab run: dataset, MLPs, estimator and budget, as the form asked and as the job runs it."""

    dataset: str
    mlps: str
    spec: str
    budget: int | None
    run: RunRequest = field(compare=False, repr=False)

    @property
    def cost(self) -> float:
        return self.run.cost_flops

    @property
    def key(self) -> str:
        """The run's cache key, computed here from the request (never taken from a browser)."""
        return cache_key(self.run)

    def payload(self) -> dict:
        return {"dataset": self.dataset, "mlps": self.mlps, "spec": self.spec, "budget": self.budget}


def parse_lab_run(values: object, *, source: str = "lab") -> LabRun:
    """A lab run from ``{"dataset", "mlps", "spec", "budget"}`` (the form's values or a job's payload)."""
    values = _mapping(values, "the lab run")
    dataset = _dataset(values.get("dataset"))
    spec = served_spec(values.get("spec"), uploads=False, refusal=MENU_ONLY)
    round_budget = rulebook_for(dataset.info.round_tag).round_budget
    budget = parse_budget(values.get("budget"), round_budget)
    rulebook = rulebook_for(dataset.info.round_tag, budget)
    mlps = _text(values.get("mlps"), "the MLP selection")
    indices = select_mlps(dataset, mlps)
    handle = served_handle(spec, uploads=False, refusal=MENU_ONLY, round_tag=rulebook.round_tag)
    run = RunRequest(dataset, indices, handle, rulebook, source=source)
    return LabRun(dataset.info.key, mlps, spec, budget, run)


@dataclass(frozen=True)
class Sweep:
    """Estimators at a ladder of budgets on the same MLPs: one run per (estimator, budget)."""

    dataset: str
    specs: tuple[str, ...]
    budgets: tuple[int, ...]
    ladder: str
    mlps: str
    curves: tuple[tuple[str, tuple[RunRequest, ...]], ...] = field(compare=False, repr=False)

    @property
    def cost(self) -> float:
        """The missing points' work: their MLPs times each budget (stored points cost nothing)."""
        return sum(curve_cost(list(requests)) for _, requests in self.curves)

    @property
    def n_points(self) -> int:
        return sum(len(requests) for _, requests in self.curves)

    def payload(self) -> dict:
        return {"dataset": self.dataset, "specs": list(self.specs), "budgets": self.ladder, "mlps": self.mlps}


def parse_sweep(dataset_key: object, specs: object, ladder: object, mlps: object, *, default_ladder: str,
                source: str = "lab") -> Sweep:
    """A sweep from a page's controls: the dataset, its estimators (a list, each served, at most
    ``MAX_SPECS``), the ladder (``LO:HI:N`` or ``B1,B2,...``; ``default_ladder`` when empty) and the MLPs."""
    names = served_specs(specs, uploads=False, refusal=MENU_ONLY)
    dataset = _dataset(dataset_key)
    tag = dataset.info.round_tag
    text = _text(ladder, "the budgets") or default_ladder
    budgets = parse_budget_ladder(text, rulebook_for(tag).round_budget)
    selection = _text(mlps, "the MLP selection")
    indices = select_mlps(dataset, selection)
    curves = tuple((spec, tuple(curve_requests(dataset, indices, served_handle(spec, uploads=False, refusal=MENU_ONLY,
                                                                               round_tag=tag),
                                               tag, budgets, source=source)))
                   for spec in names)
    return Sweep(dataset.info.key, names, tuple(budgets), text, selection, curves)

