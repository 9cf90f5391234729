"""The final evaluation end to end: suite, every pair scored, standings, tie-breaks, the record kept.

``run_final`` is what the command and the organizer's page both call. Each step is recorded in the
returned record (saved with ``whestboard.leaderboard.save_final_record``): the suite (seed, protocol,
references' sha256 and noise floor), every neighbour pair with its test, p-value, MLPs and what decided
it, every group that needed a tie-break with the extra MLPs baked for it, and the per-MLP scores the
standings views resample.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from whestboard.final import _standings
from whestboard.final._dispatch import dispatch, worker_specs, workers_configured
from whestboard.final._scoring import score_team
from whestboard.final._suite import MAX_SUITE_SEED, SEED_PROTOCOL, SEED_PROTOCOL_NAME, FinalSuite
from whestboard.leaderboard import (
    ALPHA,
    FINAL_SOURCE,
    TIE_POWER,
    MLPResult,
    Submission,
    get_submission,
    save_final_record,
    upsert,
)
from whestboard.rules import get_round, library_versions
from whestboard.scoring import (
    UPLOADS_OFF,
    RunError,
    is_file_spec,
    kept_target,
    rulebook_for,
    run_package,
    sandboxed_handle,
    served_spec,
)

DEFAULT_TRUTH_SAMPLES = 1_000_000
DEFAULT_MAX_EXTRA_MLPS = 100
MAX_MLPS = 10_000
#: The reference's noise floor may be at most this share of the best final-layer MSE before the record warns.
FLOOR_SHARE = 0.1
ProgressFn = Callable[[int, int, str], None]
TEST_TEXT = (f"neighbours are compared by the {_standings.PAIR_TEST} (Student t, n - 1 degrees of freedom; assumes "
             "independent MLPs and roughly normal log ratios): different when it rejects at 5% in the scores' "
             f"direction; close when the scores are equal within the reference noise or the 95% interval of the "
             f"geometric-mean ratio lies inside 1/{_standings.CLOSE_RATIO}..{_standings.CLOSE_RATIO}; close pairs "
             "go through extra MLPs, all-layer MSE and effective compute, and share a rank only when equal within "
             "the noise; a pair nothing decides keeps the score order, its ranks provisional")


class FinalError(ValueError):
    """A final that cannot start as asked; the message says what to change."""


@dataclass(frozen=True)
class Nominee:
    """One team's nominated submission: what to run (a file spec the sandbox takes) and where it came from."""

    team: str
    spec: str
    submission_id: str | None = None  # a stored submission the rerun is attached to


@dataclass(frozen=True)
class FinalRequest:
    round_tag: str
    nominees: tuple[Nominee, ...]
    suite_seed: int
    n_mlps: int
    truth_samples: int = DEFAULT_TRUTH_SAMPLES
    max_extra_mlps: int = DEFAULT_MAX_EXTRA_MLPS

    def __post_init__(self) -> None:
        try:
            get_round(self.round_tag)
        except KeyError as exc:
            raise FinalError(exc.args[0]) from None
        if not self.nominees:
            raise FinalError("nominate at least one submission: --submission TEAM=PATH")
        teams = [n.team for n in self.nominees]
        if len(set(teams)) != len(teams):
            twice = sorted({t for t in teams if teams.count(t) > 1})
            raise FinalError(f"each team nominates one submission; named twice: {', '.join(twice)}")
        for name, value, low, high in (("--suite-seed", self.suite_seed, 0, MAX_SUITE_SEED),
                                       ("--n-mlps", self.n_mlps, 1, MAX_MLPS),
                                       ("--truth-samples", self.truth_samples, 100, 10**10),
                                       ("--max-extra-mlps", self.max_extra_mlps, 0, MAX_MLPS)):
            if not low <= int(value) <= high:
                raise FinalError(f"{name} {value} is outside {low}..{high}")


def nominee(text: str) -> Nominee:
    """``TEAM=PATH`` (a ``whest package`` tarball, a folder, an estimator file), ``TEAM=upload:SHA256`` (an
    upload in the store) or ``TEAM=submission:ID`` (a stored submission whose package the store keeps)."""
    team, sep, target = text.partition("=")
    team, target = team.strip(), target.strip()
    if not sep or not team or not target:
        raise FinalError(f"--submission {text!r}: write TEAM=PATH (a whest package .tar.gz, a folder or a .py)")
    if target.startswith("submission:"):
        return _stored_nominee(text, team, target.split(":", 1)[1])
    if not is_file_spec(target):
        raise FinalError(f"--submission {text!r}: {target} is not a .tar.gz, a folder, a .py or upload:SHA256")
    return Nominee(team, target)


#: What a page may nominate: a package the server holds, never a path on it.
SERVED_NOMINEE_HELP = ("write TEAM=upload:SHA256 (an upload in the store), TEAM=submission:ID (a stored "
                       "submission with its package) or TEAM=kept:NAME (an estimator the operator keeps on the "
                       "server)")
MAX_NOMINEE_CHARS = 400


def served_nominee(text: object, *, uploads: bool) -> Nominee:
    """A nominee as a page names one (``scoring.served``'s rule): ``TEAM=upload:SHA256`` and
    ``TEAM=submission:ID`` where uploads are on (both run uploaded code), ``TEAM=kept:NAME`` always. A path
    is refused unread, with one sentence whatever exists there; the command line's :func:`nominee` keeps
    taking paths from the trusted local user."""
    if not isinstance(text, str) or len(text) > MAX_NOMINEE_CHARS:
        raise FinalError(f"a nominee is one line of at most {MAX_NOMINEE_CHARS} characters: {SERVED_NOMINEE_HELP}")
    team, sep, target = text.partition("=")
    team, target = team.strip(), target.strip()
    if not sep or not team or not target:
        raise FinalError(f"{text!r}: {SERVED_NOMINEE_HELP}")
    if target.startswith("submission:"):
        if not uploads:
            raise FinalError(f"{text!r}: a stored submission's package is uploaded code, and {UPLOADS_OFF}")
        return _stored_nominee(text, team, target.split(":", 1)[1])
    try:
        spec = served_spec(target, uploads=uploads)
    except RunError as exc:
        raise FinalError(f"{text!r}: {exc}") from None
    kept = kept_target(spec)
    if kept is None and not spec.startswith("upload:"):
        raise FinalError(f"{text!r}: {spec} is a built-in estimator, not a team's package: {SERVED_NOMINEE_HELP}")
    return Nominee(team, kept or spec)


def _stored_nominee(text: str, team: str, sid: str) -> Nominee:
    """A stored submission's package: the upload of the run it was scored as (``run_id``), else the upload its
    estimator names; FinalError saying what to nominate instead when the store keeps neither, or when the
    submission is another team's (each team designates one submission of its own)."""
    stored = get_submission(sid)
    if stored is None:
        raise FinalError(f"--submission {text!r}: no stored submission {sid!r}")
    if stored.team != team:  # each team designates one of its own submissions
        raise FinalError(f"--submission {text!r}: submission {sid} is team {stored.team!r}'s, not {team!r}'s; "
                         f"a team nominates one of its own submissions: write {stored.team}=submission:{sid}, "
                         f"or give {team} its own submission")
    instead = f"nominate its package instead: {team}=PATH (a whest package .tar.gz, a folder or a .py)"
    why = ""
    if stored.run_id:
        try:
            return Nominee(team, run_package(stored.run_id), sid)
        except RunError as exc:
            why = f"the run it was scored as gives no package ({exc})"
    if (stored.estimator or "").startswith("upload:"):
        return Nominee(team, stored.estimator.split(" ", 1)[0], sid)
    if not why:
        origin = f"from {stored.source}" if stored.source else "from a file"
        why = f"it was imported {origin} (no run of this app holds its package; its estimator is {stored.estimator!r})"
    raise FinalError(f"--submission {text!r}: the store keeps no package for submission {sid}: {why}; {instead}")


@dataclass
class _Progress:
    on_progress: ProgressFn | None
    total: int = 0
    done: int = 0
    scored: int = 0
    reused: int = 0
    events: list[str] = field(default_factory=list)

    def peek(self, ahead: int, label: str) -> None:
        """Report ``ahead`` pairs beyond what this process counted (scored elsewhere, not yet read here)."""
        if self.on_progress is not None:
            self.on_progress(self.done + ahead, self.total, label)

    def step(self, label: str, *, scored: bool | None = None) -> None:
        self.done += 1
        if scored is not None:
            self.scored += int(scored)
            self.reused += int(not scored)
        if self.on_progress is not None:
            self.on_progress(self.done, self.total, label)


def run_final(request: FinalRequest, *, on_progress: ProgressFn | None = None, score=None,
              save: bool = True) -> dict:
    """Run (or resume) the final and return its record; ``save`` keeps it and the rerun split.

    With Celery workers configured (``WHESTBOARD_REDIS_URL``) each phase's team batches are handed to
    them first (``_dispatch``) and this process scores only what they leave; ``score`` (a test's
    stand-in for the run path) keeps every pair in this process."""
    started = time.time()
    rnd = get_round(request.round_tag)
    rulebook = rulebook_for(request.round_tag)
    progress = _Progress(on_progress, total=request.n_mlps * (1 + len(request.nominees)))
    suite = FinalSuite(rnd, request.suite_seed, request.n_mlps, request.truth_samples,
                       progress=lambda i, n: progress.step(f"reference {i}/{n} ({request.truth_samples:,} samples)"))
    handles = {n.team: sandboxed_handle(n.spec, round_tag=rnd.tag) for n in request.nominees}
    teams = [n.team for n in request.nominees]
    specs = (worker_specs({n.team: n.spec for n in request.nominees})
             if score is None and workers_configured() else None)
    dispatched: list[dict] = []

    def run_pairs(team_list: Sequence[str], indices: Sequence[int]) -> dict[str, list[dict]]:
        if specs is not None:
            dispatched.append(dispatch(suite, team_list, indices, handles, specs, report=lambda stored, total:
                                       progress.peek(stored, f"{stored}/{total} pairs scored by the workers")))
        out: dict[str, list[dict]] = {}
        start = os.getpid() % len(team_list)  # several processes of one final start on different teams
        for team in list(team_list[start:]) + list(team_list[:start]):
            def step(entry: dict, scored: bool, team: str = team) -> None:
                progress.step(f"{team} on MLP {int(entry['mlp_index']) + 1}", scored=scored)

            found = score_team(suite, team, handles[team], rulebook, indices, on_entry=step, score=score)
            out[team] = [found[i] for i in indices]
        return {team: out[team] for team in team_list}

    base = run_pairs(teams, range(request.n_mlps))
    summaries = {t: _standings.summary(base[t]) for t in teams}

    def more(group: list[str], k: int) -> dict[str, list[dict]]:
        progress.total += k * (1 + len(group))
        suite.extend(request.n_mlps + k,
                     progress=lambda i, n: progress.step(f"extra reference {i}/{n}"))
        return run_pairs(group, range(request.n_mlps, request.n_mlps + k))

    result = _standings.standings(teams, base, request.max_extra_mlps, more)
    order, extra = result.order, result.extra
    tie_breaks = [_tie_break(group, request.n_mlps) for group in result.groups]
    standings = [_standing(result.ranks[t], t, summaries[t], extra.get(t, []), base[t], handles[t], suite,
                           t in result.provisional) for t in order]
    record = _record(request, suite, rulebook, standings, tie_breaks, base, order, progress, started)
    record["pairs"] = [d.as_dict() for d in result.pairs]
    record["workers"] = {"configured": specs is not None, "phases": dispatched,
                         "scored_by": _scored_by([e for t in teams for e in base[t] + extra.get(t, [])])}
    if save:
        record_rerun_split(request, suite, base, extra, summaries, handles)
        save_final_record(record)
    return record


def _scored_by(entries: list[dict]) -> dict[str, int]:
    """How many of the pairs each process (``host:pid``) scored; ``unknown`` for results kept before it was."""
    counts: dict[str, int] = {}
    for entry in entries:
        who = entry.get("scored_by") or "unknown"
        counts[who] = counts.get(who, 0) + 1
    return dict(sorted(counts.items()))


def _tie_break(group: dict, n: int) -> dict:
    """A close group's record: the base suite's verdicts, the extra MLPs, and each pair's decision."""
    decisions, k = group["decisions"], group["extra_mlps"]
    ps = [v.score.p_value for _, _, v in group["verdicts"]]
    known = [p for p in ps if p is not None]
    return {
        "teams": group["teams"], "test": _standings.PAIR_TEST, "p_value": max(known) if known else None, "p_values": ps,
        "base_verdicts": [{"upper": u, "lower": lo, "class": v.kind, "equal_within_noise": v.equal,
                           **v.score.as_dict()} for u, lo, v in group["verdicts"]],
        "extra_mlps": k, "extra_mlp_ids": list(range(n, n + k)),
        "decided_by": _standings.group_outcome(decisions), "order": group["order"],
        "provisional": any(d.provisional for d in decisions),
        "pairs": [d.as_dict() for d in decisions], "scores_with_extra": group["scores_with_extra"],
    }


def _standing(rank, team, numbers, extra, base, handle, suite, provisional: bool) -> dict:
    return {"rank": rank, "team": team, **numbers, "extra_mlps_scored": len(extra), "provisional": provisional,
            "noise_floor": float(sum(e.get("noise_floor") or 0.0 for e in base) / len(base)),
            "code_sha256": handle.code_sha256, "estimator": handle.label, "suite": suite.key}


def _record(request, suite, rulebook, standings, tie_breaks, base, order, progress, started) -> dict:
    n = request.n_mlps
    mean_var = float(sum(suite.truth(i)[1] for i in range(n)) / n)
    floor = mean_var / request.truth_samples
    best = min(row["final_layer_mse"] for row in standings)
    return {
        "round": request.round_tag, "suite_seed": int(request.suite_seed), "n_mlps": n,
        "truth_samples": request.truth_samples, "max_extra_mlps": request.max_extra_mlps,
        "standings": standings, "tie_breaks": tie_breaks,
        "per_mlp": {"mlp_ids": list(range(n)),
                    "scores": {t: [float(e["adjusted_final_layer_score"]) for e in base[t]] for t in order}},
        "noise": {"mean_avg_variance": mean_var, "noise_floor": floor,
                  "text": (f"references of {request.truth_samples:,} samples: an estimator's observed final-layer "
                           f"MSE carries avg_variance / K = {floor:.3g} of reference noise on average; "
                           "differences below it cannot be told apart"),
                  "floor_warning": floor_warning(floor, best, request.truth_samples)},
        "suite": {"key": suite.key, "seed_protocol": SEED_PROTOCOL, "mlp_names": suite.names[:n],
                  "references_sha256": suite.truth_digest(list(range(n))), "n_extra_mlps": len(suite.names) - n},
        "test": {"alpha": ALPHA, "power": TIE_POWER, "test": _standings.PAIR_TEST, "close_ratio": _standings.CLOSE_RATIO,
                 "text": TEST_TEXT},
        "rulebook": rulebook.as_dict(), "versions": library_versions(),
        "scorings": {"scored": progress.scored, "reused": progress.reused},
        "nominees": [{"team": x.team, "spec": x.spec, "submission_id": x.submission_id} for x in request.nominees],
        "created_at": datetime.now(UTC).isoformat(), "duration_s": time.time() - started,
    }


def floor_warning(floor: float, best: float, samples: int) -> str | None:
    """A sentence when the references' noise is too coarse for the best MSE, naming the K that would do."""
    if floor <= FLOOR_SHARE * best:
        return None
    return (f"the reference noise floor {floor:.3g} is more than {FLOOR_SHARE:.0%} of the best final-layer MSE "
            f"({best:.3g}): the references cannot resolve the top; run again with --truth-samples of at least "
            f"{int(samples * floor / (FLOOR_SHARE * best)) + 1:,}")


def final_submission_id(round_tag: str, team: str) -> str:
    return f"final:{round_tag}:{team}"[:200]


def record_rerun_split(request: FinalRequest, suite: FinalSuite, base, extra, summaries, handles) -> None:
    """Every (team, MLP) result as the ``rerun`` split: attached to the stored submission when one was
    nominated (marked nominated, as the rerun board ranks nominated submissions only; its public numbers
    stay), else to a row of its own (no public score, ``FINAL_SOURCE``: the public board never shows it)."""
    versions = library_versions()
    rows, results = [], []
    for nom in request.nominees:
        sid = nom.submission_id or final_submission_id(request.round_tag, nom.team)
        stored = get_submission(sid) if nom.submission_id else None
        if stored is not None and not stored.nominated:
            rows.append(replace(stored, nominated=True))
        if nom.submission_id is None:
            rows.append(Submission(
                submission_id=sid, team=nom.team, round=request.round_tag, submitted_at=datetime.now(UTC),
                status="graded", whestbench_version=versions["whestbench_version"],
                flopscope_version=versions.get("flopscope_version"), n_mlps=request.n_mlps,
                dataset=suite.key, estimator=f"{nom.spec} ({handles[nom.team].code_sha256[:12]})"[:500],
                source=FINAL_SOURCE, nominated=True, n_failed_mlps=summaries[nom.team]["n_failed_mlps"],
                seed_protocol=SEED_PROTOCOL_NAME))
        for e in base[nom.team] + extra.get(nom.team, []):
            results.append(MLPResult(
                submission_id=sid, mlp_index=int(e["mlp_index"]), split="rerun", mlp_name=e.get("mlp_name"),
                final_layer_mse=float(e["final_layer_mse"]), adjusted_score=float(e["adjusted_final_layer_score"]),
                failed=bool(e.get("failed")), flops_used=e.get("flops_used"),
                effective_compute=e.get("effective_compute"), multiplier=e.get("score_multiplier"),
                avg_variance=e.get("avg_variance"), meter_tampering=e.get("meter_tampering")))
    upsert(rows, results)


def pair_text(pair: dict) -> str:
    """One neighbour pair as the record keeps it: the test, its p-value, the MLPs used, what decided it."""
    shown = ", ".join(f"{k} p = {'n/a' if v is None else f'{v:.3g}'}" for k, v in pair["p_values"].items())
    return (f"  {pair['upper']} vs {pair['lower']}: {pair['decided_by']} on {pair['n_mlps']} MLPs "
            f"({shown}): {pair['reason']}")


TEXT_COLUMNS = ("rank", "team", "score", "final_layer_mse", "all_layer_mse", "effective_compute", "n_mlps",
                "n_failed_mlps")


def standings_text(record: dict) -> str:
    """The standings and every tie-break, as an organizer reads them."""
    lines = [f"final of {record['round']}: suite seed {record['suite_seed']}, {record['n_mlps']} MLPs, "
             f"references of {record['truth_samples']:,} samples", record["noise"]["text"]]
    if record["noise"].get("floor_warning"):
        lines.append("warning: " + record["noise"]["floor_warning"])
    lines.append("")
    lines.append("  ".join(f"{c:>17}" for c in TEXT_COLUMNS))
    for row in record["standings"]:
        cells = {**row, "rank": f"{row['rank']}{' (provisional)' if row.get('provisional') else ''}"}
        lines.append("  ".join(f"{cells[c]:>17.6g}" if isinstance(cells[c], float) else f"{cells[c]!s:>17}"
                               for c in TEXT_COLUMNS))
    lines.append(record["test"]["text"])
    for tie in record["tie_breaks"]:
        lines.append(f"group: {', '.join(tie['teams'])}; {tie['extra_mlps']} extra MLPs; "
                     f"decided by {tie['decided_by']}" + (" (provisional)" if tie.get("provisional") else ""))
    for pair in record.get("pairs", []):
        lines.append(pair_text(pair))
    scorings = record["scorings"]
    lines.append(f"scored {scorings['scored']} (submission, MLP) pairs, {scorings['reused']} found already scored")
    workers = workers_text(record)
    if workers:
        lines.append(workers)
    return "\n".join(lines)


def workers_text(record: dict) -> str | None:
    """Who scored the pairs, and why this process scored any itself, when Celery workers were configured."""
    workers = record.get("workers") or {}
    if not workers.get("configured"):
        return None
    by = ", ".join(f"{who} {n}" for who, n in workers.get("scored_by", {}).items())
    local = [phase["local"] for phase in workers.get("phases", []) if phase.get("local")]
    return "; ".join([f"pairs scored by process (host:pid): {by}", *local])
