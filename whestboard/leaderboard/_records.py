"""The grader's own record of a submission (AIcrowd's per-submission JSON), read as it is.

Every graded submission came back to its team as a JSON record (``"schema_version": "2.0"``, per-MLP
telemetry schema 4; the fields used and ignored are in docs/submissions-schema.md). This module reads
one, as the grader wrote it or as AIcrowd's API returns it (``{"data": {"submission": {"evaluation":
...}}}``), into rows of the import schema: one submission (the record's own id, its round from the
config snapshot checked against the round's budget, the public aggregate as the record states it, the
grader's versions as its provenance) and one per-MLP row per scored MLP of the public split (scores,
per-layer MSEs, the grader's error code, the times each cap holds). ``_files`` then passes the rows
through the same row parsers as a table's, so a record can store nothing a table could not.

The record's public score is recomputed from its scored MLPs with whestbench's own multiplier
(``whestbench.budget.score_multiplier``) and must agree with it to the record's rounding (Phase 2
records round scores to four significant digits, Phase 1 records do not); the import says that it does.
A record of a failed submission is refused with the grader's error code and message, or the smoke
test's code when that is all it says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from whestboard.leaderboard import _store
from whestboard.leaderboard._store import TIMING_FIELDS
from whestboard.rules import (
    Caps,
    cap_margins,
    flat_entry,
    is_failed,
    judge,
    round_for_shape,
    telemetry_of,
)
from whestboard.store import finite, sci

#: Aggregates must equal the mean of their per-MLP values to this relative tolerance (full precision).
AGGREGATE_RTOL = 1e-6
#: Characters of a record's value echoed in a message.
SHOWN_CHARACTERS = 60


def significant_digits(value: float) -> int:
    """The significant digits a number was written with (Python's shortest repr): 5.394e-09 has 4."""
    mantissa = repr(float(value)).lower().split("e")[0].lstrip("-").replace(".", "").strip("0")
    return max(1, len(mantissa))


def rounding_rtol(values) -> float:
    """How closely quantities computed from ``values`` can agree when the values were rounded where they came
    from: written to at most k significant digits, each is off by up to half a unit of its k-th digit
    (5 x 10^-k relative), so a mean of them and a stated mean rounded alike differ by up to 10^(1-k).
    Values at full precision give AGGREGATE_RTOL."""
    digits = max((significant_digits(v) for v in values if v is not None and math.isfinite(v) and v != 0),
                 default=17)
    return max(AGGREGATE_RTOL, 10.0 ** (1 - digits))


def _number(value: Any) -> float | None:
    """A finite number of the record, else None (a record is JSON: anything can be anywhere)."""
    return None if isinstance(value, bool) else finite(value)


def _whole(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) and number > 0 else None


def _shown(value: Any) -> str:
    """A record's value as a message echoes it: its repr, cut short."""
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass
class RecordRows:
    """A record as rows of the import schema (not yet parsed), or the problems that refuse it."""

    submission: dict | None = None
    mlps: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rtol: float = AGGREGATE_RTOL


def unwrap(document: Any) -> tuple[Any, dict | None]:
    """``(record, wrapper)``: the record AIcrowd's API wraps in ``{"data": {"submission": {"evaluation": ...}}}``
    (its ``evaluation``, which may be JSON text) with the wrapping submission; a bare record has no wrapper."""
    data = document.get("data") if isinstance(document, dict) else None
    wrapper = data.get("submission") if isinstance(data, dict) else None
    if isinstance(wrapper, dict) and "evaluation" in wrapper:
        return wrapper.get("evaluation"), wrapper
    return document, None


def is_record(document: Any) -> bool:
    """Whether a JSON document is a grader record (a ``whest run --json`` report has no config snapshot)."""
    return isinstance(document, dict) and isinstance(document.get("config_snapshot"), dict) and (
        "submission_id" in document or "state" in document)


def failure_text(record: dict) -> str:
    """Why a failed submission failed, in the grader's own words: its error code and message, else its smoke
    test's code (said to be the smoke test's)."""
    code, message = _error_parts(record.get("error"))
    if code or message:
        return f"the grader failed it with {code or 'no error code'}" + (f": {message}" if message else "")
    smoke = record.get("smoke_test_result") if isinstance(record.get("smoke_test_result"), dict) else {}
    smoke_code, smoke_message = _error_parts(smoke)
    if not smoke_message and isinstance(smoke.get("errors"), list) and smoke["errors"]:
        smoke_message = _error_parts(smoke["errors"][0])[1]
    if smoke_code or smoke_message:
        return (f"it failed in the grader's smoke test, before any MLP was scored: {smoke_code or 'no error code'}"
                + (f": {smoke_message}" if smoke_message else "") + " (the record's own error is empty)")
    return "the grader failed it, and the record says neither how nor where (no error, no smoke-test error code)"


def _error_parts(error: Any) -> tuple[str, str]:
    """(code, message) of an error as a record writes one: an object, or bare text."""
    if isinstance(error, dict):
        code = error.get("code") or error.get("error_code") or ""
        message = error.get("message") or error.get("error_message") or ""
        return _cut(str(code), 80).strip(), _cut(str(message)).strip()
    return "", _cut(str(error or "")).strip()


def _record_id(record: dict, wrapper: dict | None, name: str) -> tuple[str | None, list[str]]:
    """The record's own submission number (as text), checked against its wrapper's."""
    ids = [_id_text(value) for value in (record.get("submission_id"), (wrapper or {}).get("id")) if value is not None]
    if not ids:
        return None, [f"{name}: the record has no submission_id"]
    if None in ids:
        return None, [f"{name}: submission_id is {_shown(record.get('submission_id'))}, not a submission number"]
    if len(set(ids)) > 1:
        return None, [f"{name}: the record's submission_id {ids[0]} is not its wrapper's id {ids[1]}"]
    return ids[0], []


def _id_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return value.strip() if isinstance(value, str) and value.strip() else None


def read_record(record: Any, wrapper: dict | None, name: str, *, team: str | None, submission_id: str | None = None,
                round_tag: str | None = None, flopscope_version: str | None = None,
                split: str | None = None) -> RecordRows:
    """The rows of one record (``RecordRows``), or every problem that refuses it."""
    if not isinstance(record, dict):
        return RecordRows(problems=[f"{name}: the record's evaluation is {_shown(record)}, not a grader record"])
    sid, problems = _record_id(record, wrapper, name)
    where = f"{name} (submission {sid})" if sid else name
    if record.get("state") == "failed":
        return RecordRows(problems=[f"{where}: {failure_text(record)}; a failed submission has no score, so "
                                    "nothing was imported"])
    if record.get("state") != "completed":
        problems.append(f"{where}: the record's state is {_shown(record.get('state'))}, not 'completed': import it "
                        "once the grader has finished")
    if split not in (None, _store.PUBLIC):
        problems.append(f"{where}: a grader record holds its own public results; import it without a split")
    if submission_id and sid and submission_id.strip() != sid:
        problems.append(f"{where}: the record is submission {sid}, not {_shown(submission_id)}; leave the id out")
    team, team_problems = _team(team, wrapper, where)
    rnd, round_problems = _round(record.get("config_snapshot"), round_tag, where)
    problems += team_problems + round_problems
    versions = record.get("runtime_environment") if isinstance(record.get("runtime_environment"), dict) else {}
    flopscope = versions.get("flopscope_version") or versions.get("flopscope_server_version")
    if flopscope and flopscope_version and flopscope_version.strip() != str(flopscope).strip():
        problems.append(f"{where}: the record says flopscope {_shown(flopscope)} priced it, not "
                        f"{_shown(flopscope_version)}; leave the flopscope version out")
    results = record.get("results") if isinstance(record.get("results"), dict) else {}
    entries = [e for e in results.get("per_mlp") or [] if isinstance(e, dict)] \
        if isinstance(results.get("per_mlp"), list) else []
    scored = [e for e in entries if isinstance(e.get("scores"), dict)]
    if not scored:
        problems.append(f"{where}: no MLP of the record carries scores (the public split): nothing to import")
    aggregates = results.get("aggregates") if isinstance(results.get("aggregates"), dict) else {}
    public = aggregates.get("public") if isinstance(aggregates.get("public"), dict) else None
    if public is None:
        problems.append(f"{where}: the record has no results.aggregates.public")
    if problems or rnd is None:
        return RecordRows(problems=problems)
    rows = RecordRows()
    rows.mlps, mlp_problems = _mlp_rows(scored, entries, sid, rnd, where)
    score, score_problems = _public_score(public, where)
    rows.problems = mlp_problems + score_problems
    values = [v for row in rows.mlps for v in (_number(row["final_layer_mse"]),
                                                _number(row["adjusted_score"]))]
    rows.rtol = rounding_rtol(values + [score])
    if not rows.problems:
        rows.problems += _oracle_problems(rows, score, where)
    if rows.problems:
        return RecordRows(problems=rows.problems)
    rows.submission = _submission_row(record, wrapper, public, rows.mlps, sid, team, rnd, score,
                                      flopscope or flopscope_version, versions)
    rows.notes = [_agreement_note(rows, score, where), _coverage_note(scored, entries, rnd, where)]
    return rows


def _team(team: str | None, wrapper: dict | None, where: str) -> tuple[str | None, list[str]]:
    """``--team``, else the team the API's wrapper names; a record alone names none."""
    named = (wrapper or {}).get("team")
    named = named.get("name") if isinstance(named, dict) else None
    named = named.strip() if isinstance(named, str) and named.strip() else None
    given = team.strip() if isinstance(team, str) and team.strip() else None
    if given and named and given != named:
        return None, [f"{where}: the record is team {_shown(named)}'s, not {_shown(given)}'s"]
    if not (given or named):
        return None, [f"{where}: a grader record does not name its team; pass --team NAME (or fill Team on the page)"]
    return given or named, []


def _round(snapshot: Any, round_tag: str | None, where: str):
    """The round of the record's config snapshot, checked against the round's budget B."""
    if not isinstance(snapshot, dict):
        return None, [f"{where}: the record has no config_snapshot"]
    width, depth = _whole(snapshot.get("width")), _whole(snapshot.get("depth"))
    if width is None or depth is None:
        return None, [f"{where}: config_snapshot's width x depth is {_shown(snapshot.get('width'))} x "
                      f"{_shown(snapshot.get('depth'))}, not a shape of MLPs"]
    rnd = round_for_shape(width, depth)
    if rnd is None:
        return None, [f"{where}: no round has MLPs of {width} x {depth} (config_snapshot)"]
    if round_tag and round_tag != rnd.tag:
        return None, [f"{where}: the record's MLPs are {rnd.shape_label}, round {rnd.tag}'s, not {_shown(round_tag)}'s"]
    budget = _number(snapshot.get("flop_budget"))
    if budget != rnd.budget:
        return None, [f"{where}: it was graded with flop_budget {_shown(snapshot.get('flop_budget'))}, but round "
                      f"{rnd.tag} has B = {rnd.budget}; it is not a score of that round"]
    return rnd, []


def _mlp_rows(scored: list[dict], entries: list[dict], sid: str, rnd, where: str) -> tuple[list[dict], list[str]]:
    """One per-MLP row per scored MLP: the grader's scores, the multiplier whestbench gives its compute."""
    from whestbench.budget import effective_compute, score_multiplier

    rows, problems = [], []
    for e in scored:
        position = entries.index(e)
        flat, scores = flat_entry(e), e["scores"]
        telemetry = telemetry_of(e)
        failed = e.get("state") == "failed" or is_failed(flat)
        flops, compute = telemetry.flops_used, telemetry.effective_compute
        if flops is None:
            problems.append(f"{where} results.per_mlp[{position}]: telemetry.flops_used is missing")
            continue
        if compute is None:  # C = F + lambda R, by whestbench's own formula
            residual = telemetry.residual_wall_s
            if rnd.lambda_flops_per_second > 0 and residual is None:
                problems.append(f"{where} results.per_mlp[{position}]: neither telemetry.effective_compute nor "
                                "residual_wall_time_s is recorded, so its charged compute is unknown")
                continue
            compute = float(effective_compute(flops, residual or 0.0, rnd.lambda_flops_per_second))
        layers = scores.get("per_layer_mse")
        if isinstance(layers, list) and len(layers) != rnd.depth:
            problems.append(f"{where} results.per_mlp[{position}]: per_layer_mse has {len(layers)} layers; "
                            f"round {rnd.tag}'s MLPs have {rnd.depth}")
        rows.append({
            "submission_id": sid, "mlp_index": e.get("mlp_index"), "mlp_name": e.get("mlp_name"),
            "final_layer_mse": scores.get("final_layer_mse"), "adjusted_score": scores.get("adjusted_final_layer_score"),
            "flops_used": flops, "effective_compute": compute, "failed": failed, "split": _store.PUBLIC,
            "multiplier": float(score_multiplier(compute, rnd.budget, failed=failed)),
            "failure": _verdict(flat) if failed else None,
            "all_layers_mse": scores.get("all_layers_mse"), "per_layer_mse": layers,
            "error_code": flat.get("error_code"),
            **{name: getattr(telemetry, name) for name in TIMING_FIELDS},
        })
    return rows, problems


def _verdict(flat: dict) -> str | None:
    """The failure word of a failed MLP (None when the grader's flags and code name none)."""
    verdict = judge(flat)[0]
    return None if verdict == "ok" else verdict


def _public_score(public: dict, where: str) -> tuple[float | None, list[str]]:
    """The public aggregate's score (``score``; ``adjusted_final_layer_score`` in some records)."""
    stated = [public[k] for k in ("score", "adjusted_final_layer_score") if public.get(k) is not None]
    numbers = [_number(v) for v in stated]
    if not stated:
        return None, [f"{where}: results.aggregates.public has no score"]
    if None in numbers:
        return None, [f"{where}: results.aggregates.public.score is {_shown(stated[0])}, not a number"]
    if len(set(numbers)) > 1:
        return None, [f"{where}: results.aggregates.public states two scores ({numbers[0]!r} and {numbers[1]!r})"]
    return numbers[0], []


def _oracle_problems(rows: RecordRows, score: float, where: str) -> list[str]:
    """Each scored MLP's score must be its final-layer MSE times whestbench's multiplier, to the record's rounding."""
    problems = []
    for row in rows.mlps:
        mse, stated = _number(row["final_layer_mse"]), _number(row["adjusted_score"])
        if mse is None or stated is None:
            continue  # the row parser names the value that is no number
        expected = mse * row["multiplier"]
        if not math.isclose(stated, expected, rel_tol=rows.rtol, abs_tol=1e-300):
            problems.append(f"{where} MLP {_shown(row['mlp_index'])}: adjusted_final_layer_score {stated!r} is not "
                            f"final_layer_mse x score_multiplier(C, B) = {expected:.6g} (whestbench.budget), even to "
                            "the record's rounding")
    recomputed = _recomputed(rows)
    if not problems and recomputed is not None and not math.isclose(recomputed, score, rel_tol=rows.rtol):
        problems.append(f"{where}: its public score {score!r} is not what its {len(rows.mlps)} scored MLPs give: "
                        f"the mean of final_layer_mse x score_multiplier(C, B) (whestbench.budget) is "
                        f"{recomputed:.6g}, further than {_precision(rows)}")
    return problems[:50]


def _recomputed(rows: RecordRows) -> float | None:
    """The public score from the scored MLPs: the mean of final_layer_mse x score_multiplier(C, B)."""
    scores = [_number(r["final_layer_mse"]) for r in rows.mlps]
    if not scores or None in scores:
        return None
    return math.fsum(s * r["multiplier"] for s, r in zip(scores, rows.mlps, strict=True)) / len(scores)


def _precision(rows: RecordRows) -> str:
    if rows.rtol > AGGREGATE_RTOL:
        digits = round(1 - math.log10(rows.rtol))
        return f"to the record's rounding ({digits} significant digits, relative {rows.rtol:.0e})"
    return f"to relative {AGGREGATE_RTOL:.0e} (the record is at full precision)"


def _agreement_note(rows: RecordRows, score: float, where: str) -> str:
    recomputed = _recomputed(rows)
    return (f"{where}: public score {score!r} recomputed from its {len(rows.mlps)} scored MLPs with "
            f"whestbench.budget.score_multiplier as {recomputed:.6g}: "
            f"equal {_precision(rows)}")


def _coverage_note(scored: list[dict], entries: list[dict], rnd, where: str) -> str:
    """What was stored of the record, and the cap every one of its MLPs came closest to."""
    others = len(entries) - len(scored)
    text = f"{where}: {len(scored)} scored MLPs (the public split) imported"
    if others:
        text += (f"; its other {others} MLPs carry no scores (the withheld split) and are not stored")
    closest = cap_margins([telemetry_of(e) for e in entries], Caps.of(rnd)).closest
    if closest is not None:
        nearest = "Past a cap" if closest.state == "over" else "Closest to a cap"
        text += (f". {nearest} over all {len(entries)} MLPs: {closest.title} {sci(closest.worst, 4)} of "
                 f"{sci(closest.limit, 4)} {closest.unit} ({closest.worst_label}, {closest.worst_share:.0%})")
    return text + "."


def _submission_row(record: dict, wrapper: dict | None, public: dict, mlps: list[dict], sid: str, team: str, rnd,
                    score: float, flopscope: str | None, versions: Mapping) -> dict:
    """The submission: the record's public aggregate as stated, its times and the grader's versions."""
    sampling = _number(public.get("sampling_mse"))
    return {
        "submission_id": sid, "team": team, "round": rnd.tag, "status": "graded",
        "submitted_at": (wrapper or {}).get("createdAt") or record.get("started_at"),
        "graded_at": record.get("completed_at"),
        "whestbench_version": versions.get("whestbench_version"), "flopscope_version": flopscope,
        "mean_flops_used": math.fsum(m["flops_used"] for m in mlps) / len(mlps),
        "final_layer_mse": public.get("final_layer_mse"), "adjusted_score": score,
        "mean_multiplier": public.get("mean_score_multiplier"), "n_failed_mlps": public.get("n_failed_mlps"),
        "n_mlps": len(mlps), "mean_effective_compute": public.get("mean_effective_compute"),
        # the grader's own MC@B of these MLPs (sampling_mse = mc_at_bm(v)): the board's "vs sampling" is its
        "mean_avg_variance": sampling * rnd.mc_samples_at_budget if sampling and sampling > 0 else None,
        "dataset": f"aicrowd:{rnd.tag}", "source": _store.RECORD_SOURCE,
    }
