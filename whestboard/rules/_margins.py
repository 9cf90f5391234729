"""How close each MLP came to each of a round's caps: what the grader measured and a score does not show.

A submission scored 4e-9 is one MLP past the wall cap away from 0.02: an MLP over any cap is scored as
the all-zero prediction with multiplier 1 (``FALLBACK``). The score hides how near that cliff the passing
MLPs were, so this module turns per-MLP telemetry into the margin to each cap:

* predict wall time against the round's wall cap;
* residual wall time against its gate (0.4 s in the gated rounds) or, where it is priced, the charged
  compute C = F + lambda R against B (the combined budget), with the residual seconds left before it;
* setup time against ``setup()``'s limit;
* FLOPs F against B.

Telemetry comes in three vocabularies, read alike by :func:`telemetry_of`: the grader's own record
(``telemetry`` of an AIcrowd per-MLP entry, schema 4, and the older Phase 1 names), a ``whest run``
/ Whestboard run's per-MLP entry, and a stored per-MLP row of the leaderboard. :func:`cap_margins` is
the one function that measures the margins; every page draws what it returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from whestbench.scoring import ContestSpec

from whestboard.rules._failures import is_failed, judge

#: ``setup()``'s time limit per worker run: whestbench's own default (the grader's 5 s).
SETUP_LIMIT_S = float(ContestSpec.__dataclass_fields__["setup_timeout_s"].default)
#: From this share of a cap on, an MLP is "close" to it (within 2x) ...
CLOSE_SHARE = 0.5
#: ... and from this share on, at its edge: a busier machine or a harder MLP may push it over.
EDGE_SHARE = 0.8
#: The words of a cap's state, from safe to failed, in the order pages list them.
STATES = ("clear", "close", "edge", "over")

#: Each telemetry field and the names it goes by: the grader's record (schema 4), its older Phase 1 names,
#: whestbench's per-MLP entry, and the leaderboard's stored per-MLP columns.
TELEMETRY_NAMES: dict[str, tuple[str, ...]] = {
    "predict_wall_s": ("participant_predict_wall_s", "predict_wall_s", "wall_time_s"),
    "residual_wall_s": ("residual_wall_time_s", "residual_wall_s"),
    "setup_wall_s": ("participant_setup_wall_s", "setup_wall_s"),
    "kernel_wall_s": ("flopscope_server_kernel_wall_s", "kernel_wall_s", "flopscope_backend_time_s"),
    "overhead_wall_s": ("flopscope_server_overhead_wall_s", "overhead_wall_s", "flopscope_overhead_time_s"),
    "comms_wall_s": ("flopscope_server_comms_wall_s", "comms_wall_s"),
    "flops_used": ("flops_used",),
    "effective_compute": ("effective_compute",),
}
#: Which cap a failure verdict (``judge``) crossed.
VERDICT_CAP = {"time": "wall", "residual": "residual", "combined": "residual", "budget": "flops"}


@dataclass(frozen=True)
class Caps:
    """The limits an MLP is held to: a round's, or a run's rulebook (its budget may be the lab's own)."""

    flop_budget: float
    wall_time_limit_s: float | None
    residual_wall_time_limit_s: float | None
    lambda_flops_per_second: float = 0.0
    setup_limit_s: float | None = SETUP_LIMIT_S

    @property
    def residual_priced(self) -> bool:
        """Whether residual time is charged as FLOPs (C = F + lambda R) rather than gated."""
        return self.lambda_flops_per_second > 0

    @classmethod
    def of(cls, limits: Any) -> Caps:
        """From a ``Round``, a ``Rulebook`` or a rulebook as a report stores it (a dict)."""
        get = limits.get if isinstance(limits, Mapping) else (lambda name, default=None: getattr(limits, name, default))
        budget = get("flop_budget", None)
        if budget is None:
            budget = get("budget")
        return cls(flop_budget=float(budget), wall_time_limit_s=_number(get("wall_time_limit_s")),
                   residual_wall_time_limit_s=_number(get("residual_wall_time_limit_s")),
                   lambda_flops_per_second=float(get("lambda_flops_per_second", 0.0) or 0.0),
                   setup_limit_s=_number(get("setup_limit_s", SETUP_LIMIT_S)))


@dataclass(frozen=True)
class MLPTelemetry:
    """What was measured on one MLP (None: not recorded), and the failure verdict it got, if any."""

    label: str
    mlp_index: int | None = None
    predict_wall_s: float | None = None
    residual_wall_s: float | None = None
    setup_wall_s: float | None = None
    kernel_wall_s: float | None = None
    overhead_wall_s: float | None = None
    comms_wall_s: float | None = None
    flops_used: float | None = None
    effective_compute: float | None = None
    failure: str | None = None


def _number(value: Any) -> float | None:
    """A finite number, else None (NaN is how a frame says "not recorded")."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _first(entry: Mapping, names: Sequence[str]) -> float | None:
    for name in names:
        if name in entry:
            value = _number(entry[name])
            if value is not None:
                return value
    return None


def flat_entry(entry: Mapping) -> dict:
    """A per-MLP entry with its ``telemetry`` (the grader's record nests it) merged in, the entry's own keys winning."""
    telemetry = entry.get("telemetry")
    return {**telemetry, **{k: v for k, v in entry.items() if v is not None}} if isinstance(telemetry, Mapping) \
        else dict(entry)


def telemetry_of(entry: Mapping, label: str | None = None) -> MLPTelemetry:
    """One MLP's telemetry from any of its vocabularies (``TELEMETRY_NAMES``).

    The failure is the stored row's ``failure`` word when it has one, else the verdict ``judge`` gives
    the grader's own flags and error code.
    """
    flat = flat_entry(entry)
    index = flat.get("mlp_index")
    index = int(index) if _number(index) is not None else None
    values = {name: _first(flat, names) for name, names in TELEMETRY_NAMES.items()}
    failure = flat.get("failure") if isinstance(flat.get("failure"), str) else None
    if failure is None and is_failed(_judged_names(flat)):
        failure = judge(_judged_names(flat))[0]
    elif failure is None and flat.get("failed") in (True, 1):  # a stored row failed without its kind
        failure = "unrecorded"
    return MLPTelemetry(label=label or (f"MLP {index}" if index is not None else "MLP"), mlp_index=index,
                        failure=failure, **values)


def _judged_names(flat: dict) -> dict:
    """The entry with the times under the names ``judge`` quotes (whestbench's per-MLP names)."""
    out = dict(flat)
    for name, names in (("wall_time_s", TELEMETRY_NAMES["predict_wall_s"]),
                        ("residual_wall_time_s", TELEMETRY_NAMES["residual_wall_s"])):
        if out.get(name) is None:
            out[name] = _first(flat, names)
    return out


@dataclass(frozen=True)
class CapMargin:
    """One cap and every MLP's use of it, in the cap's own unit (seconds or FLOPs)."""

    key: str
    title: str
    unit: str
    limit: float
    labels: tuple[str, ...]
    used: tuple[float, ...]
    failed: tuple[bool, ...]  # the MLP failed on this cap (its verdict says so)
    note: str = ""
    lambda_flops_per_second: float = 0.0  # priced residual: converts the margin in FLOPs to seconds

    @property
    def shares(self) -> tuple[float, ...]:
        """Each MLP's use as a share of the cap (1 = at the cap)."""
        return tuple(u / self.limit if self.limit > 0 else math.inf for u in self.used)

    @property
    def worst_position(self) -> int:
        return max(range(len(self.used)), key=lambda i: (self.failed[i], self.used[i]))

    @property
    def worst(self) -> float:
        return self.used[self.worst_position]

    @property
    def worst_label(self) -> str:
        return self.labels[self.worst_position]

    @property
    def worst_share(self) -> float:
        return self.shares[self.worst_position]

    @property
    def margin(self) -> float:
        """What the worst MLP had left before the cap (negative: past it)."""
        return self.limit - self.worst

    @property
    def margin_seconds(self) -> float | None:
        """For priced residual time: the residual seconds the worst MLP could still have spent before C = B."""
        return self.margin / self.lambda_flops_per_second if self.lambda_flops_per_second > 0 else None

    @property
    def closest_passing(self) -> tuple[str, float] | None:
        """(label, use) of the MLP nearest the cap among those within it: how close the survivors came."""
        within = [(u, label) for label, u, f in zip(self.labels, self.used, self.failed, strict=True)
                  if not f and u <= self.limit]
        if not within:
            return None
        used, label = max(within)
        return label, used

    @property
    def n_over(self) -> int:
        return sum(f or u > self.limit for f, u in zip(self.failed, self.used, strict=True))

    def n_at_least(self, share: float) -> int:
        """MLPs at ``share`` of the cap or beyond (failed ones included)."""
        return sum(f or s >= share for f, s in zip(self.failed, self.shares, strict=True))

    @property
    def state(self) -> str:
        """``over`` (an MLP failed on it or ran past it), ``edge`` (>= EDGE_SHARE), ``close``, or ``clear``."""
        if self.n_over:
            return "over"
        if self.worst_share >= EDGE_SHARE:
            return "edge"
        return "close" if self.worst_share >= CLOSE_SHARE else "clear"


@dataclass(frozen=True)
class TimeSplit:
    """Where predict's wall time went, per MLP: participant code, flopscope's kernels, its overhead, comms with
    its server, and what the telemetry does not attribute (the five add up to the wall time)."""

    labels: tuple[str, ...]
    participant: tuple[float, ...]
    kernel: tuple[float, ...]
    overhead: tuple[float, ...]
    comms: tuple[float, ...]
    other: tuple[float, ...]

    PARTS = ("participant", "kernel", "overhead", "comms", "other")

    def mean(self, part: str) -> float:
        values = getattr(self, part)
        return math.fsum(values) / len(values) if values else 0.0

    def share(self, part: str) -> float:
        total = sum(self.mean(p) for p in self.PARTS)
        return self.mean(part) / total if total > 0 else 0.0


@dataclass(frozen=True)
class CapMargins:
    """Every MLP's margin to every cap the telemetry allows measuring, and where its time went."""

    caps: Caps
    mlps: tuple[MLPTelemetry, ...]
    margins: tuple[CapMargin, ...] = field(default=())
    split: TimeSplit | None = None
    setups: tuple[tuple[str, float], ...] = ()  # setup() runs measured apart from the MLPs: (label, seconds)

    @property
    def empty(self) -> bool:
        return not self.margins

    @property
    def closest(self) -> CapMargin | None:
        """The cap whose worst MLP came nearest to it (or went past it)."""
        if not self.margins:
            return None
        return max(self.margins, key=lambda m: (STATES.index(m.state), m.worst_share))

    def as_dict(self) -> dict:
        """Plain JSON (a job's result keeps it); :func:`margins_from_dict` reads it back."""
        return {"caps": asdict(self.caps), "mlps": [asdict(m) for m in self.mlps],
                "setups": [list(s) for s in self.setups]}


def margins_from_dict(data: Mapping) -> CapMargins:
    """What ``CapMargins.as_dict`` wrote, measured again."""
    return cap_margins([MLPTelemetry(**m) for m in data.get("mlps") or []], Caps(**data["caps"]),
                       setups=[(str(label), float(seconds)) for label, seconds in data.get("setups") or []])


def cap_margins(mlps: Iterable[MLPTelemetry], caps: Caps, *,
                setups: Sequence[tuple[str, float | None]] = ()) -> CapMargins:
    """The margin of every MLP to every cap whose use was recorded (an unrecorded cap is left out, never 0).

    ``setups``: setup() runs timed apart from the MLPs (a run sets its estimator up once); without them the
    setup cap holds each MLP's own setup time, as the grader's record gives it.
    """
    mlps = tuple(mlps)
    setups = tuple((label, float(seconds)) for label, seconds in setups if _number(seconds) is not None)
    margins: list[CapMargin] = []

    def add(key: str, title: str, unit: str, limit: float | None, attribute, note: str = "", **extra) -> None:
        if limit is None:
            return
        if key == "setup" and setups:
            rows = [(label, seconds, False) for label, seconds in setups]
        else:
            rows = [(m.label, attribute(m), VERDICT_CAP.get(m.failure or "") == key) for m in mlps]
        rows = [(label, value, failed) for label, value, failed in rows if value is not None]
        if rows:
            labels, used, failed = zip(*rows, strict=True)
            margins.append(CapMargin(key, title, unit, float(limit), labels, used, failed, note, **extra))

    add("wall", "predict wall time", "s", caps.wall_time_limit_s, lambda m: m.predict_wall_s,
        "predict() past the wall cap is stopped")
    if caps.residual_priced:
        lam = caps.lambda_flops_per_second
        rate = f"{lam:.0e}".replace("e+", "e")
        add("residual", f"charged compute C = F + {rate} R", "FLOPs", caps.flop_budget,
            lambda m: _charged(m, lam),
            f"residual time R is priced at {rate} FLOPs per second; C past B fails the MLP (combined budget)",
            lambda_flops_per_second=lam)
    else:
        add("residual", "residual wall time", "s", caps.residual_wall_time_limit_s, lambda m: m.residual_wall_s,
            "time outside flopscope (Python loops, prints, numpy) past the gate fails the MLP")
    add("setup", "setup time", "s", caps.setup_limit_s, lambda m: m.setup_wall_s, "setup() past its limit fails")
    add("flops", "FLOPs F", "FLOPs", caps.flop_budget, lambda m: m.flops_used,
        "flopscope stops predict() at the budget")
    return CapMargins(caps=caps, mlps=mlps, margins=tuple(margins), split=time_split(mlps), setups=setups)


def _charged(m: MLPTelemetry, lam: float) -> float | None:
    """C = F + lambda R as recorded, else computed with whestbench's own formula."""
    if m.effective_compute is not None:
        return m.effective_compute
    if m.flops_used is None or m.residual_wall_s is None:
        return None
    from whestbench.budget import effective_compute

    return float(effective_compute(m.flops_used, m.residual_wall_s, lam))


def time_split(mlps: Sequence[MLPTelemetry]) -> TimeSplit | None:
    """Predict's wall time of each MLP whose kernel time was recorded, in five parts that add up to it.

    Participant: the residual time the grader meters (wall time outside flopscope: the participant's own
    Python), else what is left after flopscope's kernels, overhead and comms. Other: what is left beside
    those (flopscope time a record under the older names does not split out); never below 0.
    """
    rows = [m for m in mlps if m.predict_wall_s is not None and m.kernel_wall_s is not None]
    if not rows:
        return None
    parts: dict[str, list[float]] = {p: [] for p in TimeSplit.PARTS}
    for m in rows:
        kernel, overhead, comms = m.kernel_wall_s, m.overhead_wall_s or 0.0, m.comms_wall_s or 0.0
        rest = max(0.0, m.predict_wall_s - kernel - overhead - comms)
        participant = min(m.residual_wall_s, rest) if m.residual_wall_s is not None else rest
        other = rest - participant if rest - participant > 1e-9 * m.predict_wall_s else 0.0  # not rounding noise
        for part, value in zip(TimeSplit.PARTS, (participant, kernel, overhead, comms, other),
                               strict=True):
            parts[part].append(value)
    return TimeSplit(tuple(m.label for m in rows), *(tuple(parts[p]) for p in TimeSplit.PARTS))
