"""What a user asks a run for, read and bounded before anything is built: MLP selections and budgets.

Every page, the CLI and the upload queue read a selection ("0:8", "3", "0,2,5") and a budget ("2**41",
"0.5B") through these parsers, so one bad value gets the same sentence everywhere: what was wrong, the
value (cut short when long) and what to write instead. A selection is checked against the dataset's size
from its bounds, in memory proportional to what it selects; a power is judged by its logarithm before it
is computed.
"""

from __future__ import annotations

import itertools
import math
import numbers
import re
from collections.abc import Iterable

from whestboard.data import MLPDamaged


class RunError(ValueError):
    """A run that cannot start (bad MLP selection, estimator setup failed); says what to change."""



#: A budget above this many times the round's B is refused. The grader grants exactly B, the
#: convergence band is measured to 4 x B, and no predict could spend 1000 x B (6.8e13 FLOPs at
#: v1-warmup, 2.2e15 at v2-phase2) inside the round's 60-120 s wall cap; the cap also keeps every
#: budget far inside the run store's 64-bit integer column.
MAX_BUDGET_MULTIPLE = 1000


#: The longest budget text read: a budget is a number, never a kilobyte.
MAX_BUDGET_CHARS = 64


BUDGET_HELP = "write FLOPs (2.2e12, 2**41, 68_000_000_000) or a multiple of the round's B (0.5B); empty means B"


SELECTION_HELP = "write indices such as 0:8, 3 or 0,2,5 (start:stop[:step], stop excluded); empty means all"


#: Characters a selection may use per MLP of the dataset: every MLP listed once, with spaces.
SELECTION_CHARS_PER_MLP = 16


_DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


_MULTIPLE_OF_B = re.compile(rf"([+-]?{_DECIMAL})?\s*[bB]")


_POWER = re.compile(rf"({_DECIMAL})\s*\*\*\s*([+-]?{_DECIMAL})")


_PLAIN = re.compile(rf"[+-]?(?:{_DECIMAL}|inf|infinity|nan)", re.IGNORECASE)  # float() reads it


_INDEX = re.compile(r"\+?[0-9]{1,40}")


def quoted(value: object, limit: int = 40) -> str:
    """``repr`` of what a user sent, cut to ``limit`` characters so a message never echoes a megabyte."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr() refuses past 4300 digits
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    return repr(text[:limit]) + f"… ({len(text):,} characters)"


def check_budget(value: float, round_budget: int, *, shown: str | None = None) -> None:
    """Refuse a budget that is not a number, below 1 FLOP or above MAX_BUDGET_MULTIPLE x B, saying why."""
    shown = shown or quoted(value)
    cap = MAX_BUDGET_MULTIPLE * round_budget
    if math.isnan(value):
        raise RunError(f"budget per MLP {shown} is not a number: {BUDGET_HELP}")
    if value < 1:
        raise RunError(f"budget per MLP {shown} is below 1 FLOP: write a positive budget such as 2.2e12 or 0.5B")
    if value > cap:
        size = "more than 1e300" if math.isinf(value) else f"{value:.3g}"
        raise RunError(
            f"budget per MLP {shown} is {size} FLOPs, above the most a run accepts, {MAX_BUDGET_MULTIPLE} x B = "
            f"{cap:.3g} FLOPs (the grader grants B = {round_budget:.3g}; no predict could spend more within the "
            f"round's wall cap): write at most {MAX_BUDGET_MULTIPLE}B, e.g. 2B or {2 * round_budget:.3g}"
        )


def parse_budget(text: str | int | float | None, round_budget: int) -> int | None:
    """``None``/"" -> None (the round's); "2.2e12", "2**41", "68_000_000_000" or "0.5B" -> FLOPs.

    Sizes are bounded before anything is computed: the text's length, and for a
    power its magnitude ``exp * log10(base)``, so "2**99999999" is refused without
    building the number. Accepted budgets lie in [1, MAX_BUDGET_MULTIPLE x B].
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    value = _budget_value(text, round_budget)
    check_budget(value, round_budget, shown=quoted(text))
    return int(round(value))


def _budget_value(text: object, round_budget: int) -> float:
    """What a text or JSON number names, as a float (inf when beyond 1e300, nan when undefined)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise RunError(f"budget per MLP {quoted(text)} is not a number: {BUDGET_HELP}")
    if isinstance(text, int):
        return float(text) if text.bit_length() < 1000 else math.inf
    if isinstance(text, float):
        return text
    if len(text) > MAX_BUDGET_CHARS:
        raise RunError(f"budget per MLP {quoted(text)} is too long to be a budget: {BUDGET_HELP}")
    raw = text.strip().replace("_", "").replace(",", "")
    if match := _MULTIPLE_OF_B.fullmatch(raw):
        return (float(match.group(1)) if match.group(1) else 1.0) * round_budget  # a float overflow is inf
    if match := _POWER.fullmatch(raw):
        return _bounded_power(float(match.group(1)), float(match.group(2)))
    if _PLAIN.fullmatch(raw):
        return float(raw)
    raise RunError(f"cannot read budget per MLP {quoted(text)}: {BUDGET_HELP}")


def _bounded_power(base: float, exponent: float) -> float:
    """``base ** exponent`` when it is within 1e-300..1e300; inf above, 0 below, judged from the logarithm."""
    if base == 0 or base == 1:
        return float(base) if exponent > 0 or base == 1 else math.nan
    magnitude = exponent * math.log10(base)  # base > 0: the grammar has no sign on it
    if math.isnan(magnitude) or magnitude > 300:
        return math.inf
    return base**exponent if magnitude > -300 else 0.0


def parse_mlp_selection(text: str | int | Iterable[int] | None, available: list[int]) -> list[int]:
    """"0:8", "3", "0,2,5", "0:4,7" (or a list) -> sorted dataset indices; all when empty.

    Ranges are checked against the dataset's indices by arithmetic and never
    expanded past its last index, so memory is O(MLPs selected) whatever the
    numbers: "0:100000000" on a 32-MLP dataset is refused at once, naming the MLPs
    it lacks. No selection needs more comma parts (or list entries) than the
    dataset has MLPs, nor more than SELECTION_CHARS_PER_MLP characters per MLP.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return list(available)
    if not available:
        raise RunError("this dataset has no MLPs to select")
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if isinstance(text, str):
        return _select(_selection_spans(text, len(available)), available)
    if isinstance(text, Iterable) and not isinstance(text, (bytes, dict)):
        return _select_listed(_selection_list(text, len(available)), available)
    raise RunError(f"cannot read MLP selection {quoted(text)}: {SELECTION_HELP}")


def selection_text(indices: Iterable[int]) -> str:
    """The shortest selection ``parse_mlp_selection`` reads back as these indices: runs as ``a:b``
    (``[0, 1, 2, 3, 7]`` -> ``"0:4,7"``), so a page can put a set of MLPs in its address."""
    parts, run = [], []
    for i in sorted(set(int(i) for i in indices)):
        if run and i != run[-1] + 1:
            parts.append(f"{run[0]}:{run[-1] + 1}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(i)
    if run:
        parts.append(f"{run[0]}:{run[-1] + 1}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


Span = tuple[int, int | None, int]  # start, stop (None: to the dataset's end), step


def select_mlps(dataset, selection: str | int | Iterable[int] | None) -> list[int]:
    """The MLPs of ``dataset`` a user's selection names; empty means every readable one.

    Checked against every MLP the dataset holds, so a damaged one is refused with its file, reason and
    fix (``MLPDamaged``) rather than reported missing, before any work starts.
    """
    if selection is None or (isinstance(selection, str) and not selection.strip()):
        return list(dataset.indices)
    chosen = parse_mlp_selection(selection, dataset.held_indices)
    try:
        dataset.refuse_damaged(chosen)
    except MLPDamaged as exc:
        raise RunError(str(exc)) from exc
    return chosen


def _selection_spans(text: str, n_mlps: int) -> list[Span]:
    max_chars = SELECTION_CHARS_PER_MLP * n_mlps + 64
    if len(text) > max_chars:
        raise RunError(f"the MLP selection is {len(text):,} characters long, more than the {max_chars:,} that "
                       f"can name this dataset's {n_mlps} MLPs: {SELECTION_HELP}")
    parts = text.split(",", n_mlps)
    if len(parts) > n_mlps:
        raise RunError(f"the MLP selection has more than {n_mlps:,} comma-separated parts but the dataset has only "
                       f"{n_mlps:,} MLPs: {SELECTION_HELP}")
    return [_selection_part(part.replace(" ", "")) for part in parts if part.strip()]


def _selection_part(part: str) -> Span:
    """One comma part, "3" or "start:stop[:step]", as numbers (nothing is enumerated here)."""
    pieces = part.split(":", 3)
    if len(pieces) > 3 or not all(p == "" or _INDEX.fullmatch(p) for p in pieces):
        if any(p.startswith("-") and _INDEX.fullmatch(p[1:]) for p in pieces):
            raise RunError(f"MLP selection part {quoted(part)} has a negative number: indices and steps count up "
                           f"from 0 (no counting from the end): {SELECTION_HELP}")
        raise RunError(f"cannot read MLP selection part {quoted(part)}: {SELECTION_HELP}")
    if len(pieces) == 1:
        return int(pieces[0]), int(pieces[0]) + 1, 1
    start = int(pieces[0]) if pieces[0] else 0
    stop = int(pieces[1]) if pieces[1] else None
    step = int(pieces[2]) if len(pieces) == 3 and pieces[2] else 1
    if step < 1:
        raise RunError(f"MLP selection part {quoted(part)} has step {step}: a step must be 1 or more")
    if stop is not None and stop <= start:
        raise RunError(f"MLP range {quoted(part)} selects no MLP (the stop is excluded): write start:stop with "
                       f"start below stop, e.g. {start}:{start + 1}")
    return start, stop, step


def _selection_list(items: Iterable, n_mlps: int) -> list[int]:
    chosen = list(itertools.islice(iter(items), n_mlps + 1))
    if len(chosen) > n_mlps:
        raise RunError(f"the MLP selection lists more than {n_mlps:,} MLPs but the dataset has only {n_mlps:,}: "
                       f"{SELECTION_HELP}")
    if not all(type(i) is int or (isinstance(i, numbers.Integral) and not isinstance(i, bool)) for i in chosen):
        raise RunError(f"cannot read MLP selection {quoted(chosen)}: indices are whole numbers")
    if any(i < 0 for i in chosen):
        raise RunError(f"MLP selection {quoted(chosen)} has a negative index: indices count up from 0")
    return [int(i) for i in chosen]


def _select(spans: list[Span], available: list[int]) -> list[int]:
    """The dataset indices the spans cover, or a RunError naming the ones the dataset lacks.

    Coverage is marked in one bytearray over the dataset's index span by slice
    assignment, so many overlapping parts cost C loops, never a Python loop per
    index; what lies past the dataset's last index stays a lazy ``range``.
    """
    present = set(available)
    end = max(available) + 1
    covered = bytearray(end)
    beyond: list[range] = []
    for start, stop, step in spans:
        wanted = range(start, max(end, start + 1) if stop is None else stop, step)  # lazy: O(1) memory
        inside = range(start, min(wanted.stop, end), step)  # never longer than the dataset's index span
        if inside:
            covered[inside.start:inside.stop:step] = b"\x01" * len(inside)
        outside = wanted[len(inside):]  # len() of a huge range overflows; slicing and indexing do not
        if outside:
            beyond.append(outside)
    gaps = (i for i in itertools.compress(range(end), covered) if i not in present)
    missing = [range(i, i + 1) for i in itertools.islice(gaps, 7)] + list(dict.fromkeys(beyond))
    if missing:
        raise RunError(_missing_message(missing, available))
    chosen = sorted(i for i in present if covered[i])
    if not chosen:
        raise RunError(f"the MLP selection is empty: {SELECTION_HELP}")
    return chosen


def _select_listed(listed: list[int], available: list[int]) -> list[int]:
    """:func:`_select` of one index per span, by set arithmetic: what every run request re-checks (a sweep's
    384 points on 1000 MLPs spent seconds in a web request marking each index in a bytearray)."""
    present, end = set(available), max(available) + 1
    gaps = sorted({i for i in listed if i < end and i not in present})[:7]
    beyond = list(dict.fromkeys(range(i, i + 1) for i in listed if i >= end))
    if gaps or beyond:
        raise RunError(_missing_message([range(i, i + 1) for i in gaps] + beyond, available))
    if not listed:
        raise RunError(f"the MLP selection is empty: {SELECTION_HELP}")
    return sorted(set(listed))


def _missing_message(missing: list[range], available: list[int]) -> str:
    """"MLPs 32..99999999 are not in this dataset (it has 32 MLPs: 0..31)", naming at most six pieces."""
    names = [_range_name(piece) for piece in missing[:6]] + (["…"] if len(missing) > 6 else [])
    single = len(missing) == 1 and missing[0][0] == missing[0][-1]
    subject = f"MLP {names[0]} is" if single else f"MLPs {', '.join(names)} are"
    return (f"{subject} not in this dataset (it has {len(available)} MLPs: {_span(available)}); "
            f"{SELECTION_HELP}")


def _range_name(piece: range) -> str:
    if piece[0] == piece[-1]:
        return str(piece[0])
    return f"{piece[0]}..{piece[-1]}" + (f" (step {piece.step})" if piece.step != 1 else "")


def _span(indices: list[int]) -> str:
    if indices and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}..{indices[-1]}"
    return ", ".join(map(str, indices[:10])) + (" ..." if len(indices) > 10 else "")
