"""Everything the leaderboard page shows of one round beside its figures, gathered as plain values.

``board(round_tag, split, organizer=..., team=...)`` answers a ``BoardView``: the field's counts and
summary in words, the ranking rows (the top ``RANKING_ROWS`` and the chosen team's; the page pages
``ranking_frame`` itself instead), the neighbours a paired test cannot separate, the flagged teams with their flags in words, and why a
split was refused. The page only turns these into components; every number is read through
``integrity.viewer_board``, so the organizer check happens here, on the server.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import pandas as pd
from sqlalchemy.exc import SQLAlchemyError

from whestboard.leaderboard import _flags, _integrity, _ranking, _standings, _store
from whestboard.rules import ALL_ROUNDS, get_round
from whestboard.store import finite, sci

#: Ranking rows sent to the page: the top of the board (and the chosen team's row, wherever it ranks).
RANKING_ROWS = 1_000

#: What a read of an unreachable or broken store raises: the page says so instead of a traceback.
READ_ERRORS = (SQLAlchemyError, OSError)
#: What a refused or failed write to the store raises (after its retries): nothing was changed.
WRITE_ERRORS = (SQLAlchemyError,)


@dataclass(frozen=True)
class FlaggedTeam:
    team: str
    submission_id: str
    text: str
    kinds: tuple[str, ...] = ()  # the kinds of its flags (keys of _flags.FLAG_LABELS)


@dataclass(frozen=True)
class PricedWith:
    """One pair of library versions that priced ranked scores, and how many of the ranked submissions."""

    whestbench_version: str  # _store.UNKNOWN when the file it came from did not say
    flopscope_version: str
    n_submissions: int

    @property
    def label(self) -> str:
        return versions_text(self.whestbench_version, self.flopscope_version)


@dataclass(frozen=True)
class BoardView:
    """One round's board as a viewer may see it (the public split's columns only without the token)."""

    round_tag: str
    split: str  # the split shown: the public one when the asked split was refused
    refused: str | None  # why the asked split was refused, a sentence; None when it is shown
    per_team: dict[str, int]  # submissions of the round per team, any status
    team_unknown: bool  # the chosen team has no submission in the round
    summary: list[str]
    rows: list[dict]
    leader_id: str | None
    ties: str | None
    flagged: list[FlaggedTeam]
    table: pd.DataFrame  # the whole board (every team's best), for the team panel
    # what priced the ranked scores, one entry per (whestbench, flopscope) pair, most submissions first
    priced: tuple[PricedWith, ...] = ()

    @property
    def mixed_versions(self) -> str | None:
        """The warning when the board ranks together scores priced by different versions; None otherwise."""
        return mixed_versions_text(self.priced)

    @property
    def teams(self) -> list[str]:
        return sorted(self.per_team)


def board(round_tag: str, split: str, *, organizer: bool, team: str | None = None,
          url: str | None = None, rows: bool = True) -> BoardView:
    """The board of ``round_tag`` on ``split`` for a viewer (``organizer``: the token was checked).

    ``rows``: whether to turn the top ``RANKING_ROWS`` (and the chosen team's) into ranking rows; False
    when the caller pages ``ranking_frame`` itself.
    """
    refused = None
    try:
        _integrity.require_split_access(split, organizer)
    except PermissionError as exc:
        refused, split = str(exc), _store.PUBLIC
    per_team, _ = _store.round_counts(round_tag, url=url)
    ordered = ranking_frame(round_tag, split, organizer=organizer, url=url)
    summary = field_summary(round_tag, sum(per_team.values()), len(per_team))
    if rows and len(ordered) > RANKING_ROWS:
        summary.append(f" The ranking shows the top {RANKING_ROWS:,} of {len(ordered):,} teams; choose a team to add "
                       "its row.")
    shown = ordered[(ordered.index < RANKING_ROWS) | (ordered["team"] == team)] if rows else ordered.iloc[:0]
    ties, flagged, priced = _judged(ordered, round_tag, split, organizer, url)
    return BoardView(
        round_tag=round_tag, split=split, refused=refused, per_team=per_team,
        team_unknown=bool(team) and team not in per_team, summary=summary,
        rows=[ranking_row(r) for r in shown.to_dict("records")],
        leader_id=ordered["submission_id"].iloc[0] if len(ordered) else None,
        ties=ties, flagged=flagged, table=ordered, priced=priced,
    )


def _judged(ordered: pd.DataFrame, round_tag: str, split: str, organizer: bool, url: str | None) -> tuple:
    """The board's ties, flags and pricing: read off the ranking frame once per store revision and viewer (each
    walks every team's row; 0.1 s a view at 2,000 teams that no view changes)."""
    viewer = "organizer" if organizer else "public"
    return _store.cached(f"judged:{round_tag}:{split}:{viewer}",
                         lambda: (ties_text(ordered), flagged_teams(ordered), priced_with(ordered)), url=url)


def ranking_frame(round_tag: str, split: str, *, organizer: bool, url: str | None = None) -> pd.DataFrame:
    """Every team's best on ``split`` as a viewer may see it, with what priced it, in rank order (ties by
    submission id): the frame a paged ranking sorts, filters and pages (``ranking_row`` turns a row into
    what the page shows). The public split when the viewer may not see ``split``."""
    try:
        _integrity.require_split_access(split, organizer)
    except PermissionError:
        split = _store.PUBLIC

    def compute() -> pd.DataFrame:
        table = with_pricing(_integrity.viewer_board(round_tag, split, organizer=organizer, url=url), round_tag,
                             split, url)
        return table.sort_values(["rank", "submission_id"], kind="mergesort", ignore_index=True)

    # One frame per store revision and viewer serves the board's summary and every page turn, sort and filter
    # of the paged ranking (each reads it, none changes it), instead of a join and a sort for each.
    return _store.cached(f"ranking:{round_tag}:{split}:{'organizer' if organizer else 'public'}", compute, url=url)


#: What priced a submission's score, as its stored row says.
PRICING_COLUMNS = ("whestbench_version", "flopscope_version", "seed_protocol")


def with_pricing(table: pd.DataFrame, round_tag: str, split: str, url: str | None) -> pd.DataFrame:
    """The board with each ranked submission's versions and seed protocol, read by id once per store revision."""
    missing = [c for c in PRICING_COLUMNS if c not in table.columns]
    if not missing or not len(table):
        return table.assign(**{c: pd.Series(dtype=object) for c in missing})

    def compute() -> pd.DataFrame:
        rows = _store.submissions_frame(ids=table["submission_id"].tolist(), url=url)
        return rows.set_index("submission_id")[list(PRICING_COLUMNS)]

    ids = hashlib.sha256("\n".join(map(str, table["submission_id"])).encode()).hexdigest()[:16]
    pricing = _store.cached(f"pricing:{round_tag}:{split}:{ids}", compute, url=url)
    return table.join(pricing[missing], on="submission_id")


def _version(value) -> str:
    """A stored version as shown: blank or missing is unknown (the file did not say), never a guess."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or not str(value).strip():
        return _store.UNKNOWN
    return str(value).strip()


def versions_text(whestbench_version, flopscope_version) -> str:
    """``whestbench 0.16.2 · flopscope 0.12.4``; an unknown version reads "unknown"."""
    return f"whestbench {_version(whestbench_version)} · flopscope {_version(flopscope_version)}"


def priced_with(table: pd.DataFrame) -> tuple[PricedWith, ...]:
    """The version pairs that priced the board's ranked scores, with how many ranked submissions each."""
    if not len(table):
        return ()
    pairs = pd.DataFrame({
        "whestbench": [_version(v) for v in table.get("whestbench_version", pd.Series([None] * len(table)))],
        "flopscope": [_version(v) for v in table.get("flopscope_version", pd.Series([None] * len(table)))],
    })
    counts = pairs.value_counts(sort=False).reset_index(name="n")
    counts = counts.sort_values(["n", "whestbench", "flopscope"], ascending=[False, True, True], kind="mergesort")
    return tuple(PricedWith(r.whestbench, r.flopscope, int(r.n)) for r in counts.itertuples(index=False))


def versions_warning(round_tag: str, split: str, *, organizer: bool, url: str | None = None) -> str | None:
    """``board(...).mixed_versions`` without building the ranking rows: the board's reads, all cached."""
    try:
        _integrity.require_split_access(split, organizer)
    except PermissionError:
        split = _store.PUBLIC
    return mixed_versions_text(_judged(ranking_frame(round_tag, split, organizer=organizer, url=url), round_tag,
                                       split, organizer, url)[2])


def mixed_versions_text(priced: tuple[PricedWith, ...]) -> str | None:
    """The warning, in words, when more than one pair of versions priced the ranked scores."""
    if len(priced) < 2:
        return None
    groups = "; ".join(f"{p.label}: {p.n_submissions:,} submission{'' if p.n_submissions == 1 else 's'}"
                       for p in priced)
    return ("This board ranks together scores priced by different versions (" + groups + "). flopscope "
            "releases move FLOP prices, so these scores are not priced alike; an organizer can re-score a stored "
            "package under the installed versions.")


def field_summary(round_tag: str, n_submissions: int, n_teams: int) -> list[str]:
    """The round in words: its size, shape, budget, and the Monte Carlo reference with its noise floor."""
    rnd = get_round(round_tag)
    ref = _ranking.round_reference(round_tag)
    parts = [f"{n_submissions:,} submissions from {n_teams:,} teams in {round_tag} "
             f"({rnd.shape_label}, B = {sci(rnd.budget)} FLOPs, residual time {rnd.residual_rule})."]
    if ref is None:
        parts.append(" No dataset of this round is served, so no Monte Carlo curve is drawn.")
        return parts
    parts.append(f" Monte Carlo curve from {ref.dataset_key} ({ref.n_mlps} MLPs): mean σ² = "
                 f"{sci(ref.mean_avg_variance)}, MC@B = {sci(rnd.mc_at_bm(ref.mean_avg_variance))}, "
                 f"reference noise floor = {sci(ref.noise_floor)} (MSE differences below it are not resolved).")
    if ref.note:
        parts.append(" " + ref.note)
    return parts




def _count(value) -> int | None:
    number = finite(value)
    return None if number is None else int(number)


def has_per_mlp(row: dict) -> bool:
    """Whether a ranking row came with per-MLP results (only then has it an interval, and a pairing)."""
    return finite(row.get("ci_low")) is not None


def ranking_row(r: dict) -> dict:
    """One board row as the ranking grid shows it (JSON-safe: NaN as None, numbers in words where read)."""
    interval = f" [{sci(r['ci_low'])}, {sci(r['ci_high'])}]" if has_per_mlp(r) else " (no per-MLP results)"
    return {
        "rank": int(r["rank"]), "team": r["team"], "submission_id": r["submission_id"],
        "score_text": sci(r["adjusted_score"], 4) + interval, "adjusted_score": r["adjusted_score"],
        "vs_leader": verdict_text(r), "vs_mc": finite(r["vs_mc"]),
        "final_layer_mse": finite(r["final_layer_mse"]), "mean_flops_used": finite(r["mean_flops_used"]),
        "mean_multiplier": finite(r["mean_multiplier"]), "n_failed_mlps": _count(r["n_failed_mlps"]),
        "n_mlps": _count(r["n_mlps"]), "failures": r.get("failures") or "",
        "submitted": r["submitted_at"].strftime("%Y-%m-%d %H:%M"),
        "flags": _flags.flags_text(r), "has_per_mlp": has_per_mlp(r),
        "priced_with": versions_text(r.get("whestbench_version"), r.get("flopscope_version")),
        "seed_protocol": _version(r.get("seed_protocol")),
    }


def verdict_text(row: dict) -> str:
    verdict = row["verdict"]
    if verdict == _ranking.VERDICT_LEADER:
        return "leader"
    if verdict == _ranking.VERDICT_TIED:
        return f"≈ leader (p = {row['p_value']:.2g}, {int(row['n_shared'])} MLPs)"
    if verdict == _ranking.VERDICT_BEHIND:
        return f"behind (p = {row['p_value']:.2g}, {int(row['n_shared'])} MLPs)"
    return f"— {verdict}"


def flagged_teams(table: pd.DataFrame) -> list[FlaggedTeam]:
    """The teams whose best carries a flag (``_flags.row_flags``, the one vocabulary the ranking's Flags cell
    draws too), by rank."""
    flagged = []
    for r in table.to_dict("records"):
        flags = _flags.row_flags(r)
        if flags:
            flagged.append(FlaggedTeam(r["team"], r["submission_id"], " · ".join(map(str, flags)),
                                       tuple(f.kind for f in flags)))
    return flagged


def ties_text(table: pd.DataFrame) -> str | None:
    """The neighbours at the top a paired test cannot tell apart, and what would separate #1 from #2."""
    if len(table) < 2:
        return None
    ordered = table.sort_values("adjusted_score", kind="mergesort").to_dict("records")
    top = _integrity.TOP_NEIGHBOURS
    tied = [f"{upper['team']} ≈ {lower['team']} (p = {upper['p_next']:.2g})"
            for upper, lower in zip(ordered[: top - 1], ordered[1:top], strict=False) if upper["tied_next"]]
    text = "Neighbours at the top a paired test cannot tell apart: " + (", ".join(tied) or "none") + "."
    first, second = ordered[0], ordered[1]
    separation = _separation_text(first.get("extra_mlps"), bool(first["tied_next"]))
    if separation:
        text += f" #1 {first['team']} against #2 {second['team']}: {separation}"
    return text


def _separation_text(extra, tied: bool) -> str | None:
    """How many more paired MLPs would separate #1 from #2, in words; None when it is unknown."""
    if extra is None or (isinstance(extra, float) and math.isnan(extra)):
        return None
    if extra == math.inf:
        return "never separated (their differences average to 0)."
    if extra > 0:
        return f"about {int(extra):,} extra MLPs from the same distribution would separate them."
    if tied:
        return "the spread of their differences says their MLPs suffice, yet the paired test does not separate them."
    return "already separated."


# ---------------------------------------------------------------------------
# what the page opens on, and one team's panel
# ---------------------------------------------------------------------------


def default_round(*, url: str | None = None) -> str:
    """The round the board opens on without one in its address: the latest round with submissions."""
    present = _store.rounds_present(url=url)
    for tag in reversed(list(ALL_ROUNDS)):
        if tag in present:
            return tag
    return list(ALL_ROUNDS)[-1]


def compare_pair(row: dict, leader: str | None) -> tuple[str, str | None] | None:
    """The sides of the paired comparison a ranking row links to: ``("sub:ID", "sub:LEADER")`` (the leader's
    own row: ``("sub:ID", None)``, compare it with anything); None when it has no per-MLP results to pair."""
    if not row.get("has_per_mlp"):
        return None
    own = f"sub:{row['submission_id']}"
    return (own, None) if row["submission_id"] == leader else (own, f"sub:{leader}")


@dataclass(frozen=True)
class ShareSpread:
    """F / C of a submission's MLPs where residual time is priced: lowest, median, highest, over how many."""

    n_mlps: int
    lowest: float
    median: float
    highest: float


@dataclass(frozen=True)
class TeamView:
    """One team as the board of ``round_tag`` shows it: its graded submissions *of this round* by time, its best
    there (never a best from another round, with another budget), the flags of its ranked row (the Flags
    cell's, from ``_flags.row_flags``), F / C of its best's MLPs and its failed MLPs by kind."""

    team: str
    round_tag: str
    history: pd.DataFrame  # integrity.team_history rows of this round
    other_rounds: dict[str, int]  # graded submissions in other rounds, by round
    flags: tuple[_flags.Flag, ...]
    ranked: bool  # the team has a row on this round's public board
    share: ShareSpread | None
    failures: dict[str, str]  # submission id -> failed MLPs by kind, in words
    best_mlps: pd.DataFrame | None = None  # the public per-MLP rows of its best submission of this round

    @property
    def best(self) -> dict | None:
        if self.history.empty:
            return None
        return self.history.loc[self.history["adjusted_score"].idxmin()].to_dict()


def team_view(team: str, round_tag: str, *, organizer: bool, url: str | None = None) -> TeamView:
    """What the team panel shows of ``team`` on the board of ``round_tag`` (the team's rows only)."""
    points = _store.team_submissions(team, url=url)
    every = _integrity.team_history(points, team)
    history = every[every["round"] == round_tag].reset_index(drop=True)
    other = every[every["round"] != round_tag]["round"].value_counts()
    table = board(round_tag, _store.PUBLIC, organizer=organizer, url=url).table
    own = table[table["team"] == team].to_dict("records")
    mlps = _store.team_mlp_results(team, url=url)
    mlps = mlps[mlps["submission_id"].isin(history["submission_id"])]
    breakdown = _integrity.failure_breakdown(mlps)
    view = TeamView(team=team, round_tag=round_tag, history=history,
                    other_rounds={str(k): int(v) for k, v in other.items()},
                    flags=_flags.row_flags(own[0]) if own else (), ranked=bool(own), share=None,
                    failures={sid: _integrity.breakdown_text(counts) for sid, counts in breakdown.items()})
    best = view.best
    if best is None:
        return view
    rows = mlps[mlps["submission_id"] == best["submission_id"]].reset_index(drop=True)
    return replace(view, share=share_spread(rows, round_tag), best_mlps=rows)


def share_spread(rows: pd.DataFrame, round_tag: str) -> ShareSpread | None:
    """F / C of a submission's per-MLP rows where residual time is priced; None where it is not, or unknown."""
    if get_round(round_tag).lambda_flops_per_second <= 0 or rows.empty:
        return None
    share = _integrity.per_mlp_share(rows).dropna()
    if share.empty:
        return None
    return ShareSpread(len(share), float(share.min()), float(share.median()), float(share.max()))


def team_of_round(team: str | None, round_tag: str, *, url: str | None = None) -> pd.DataFrame:
    """The team's submissions of ``round_tag`` (none without a team): its highlighted dots, from its own rows."""
    if not team:
        return _store.submissions_frame(ids=[], url=url)
    rows = _store.team_submissions(team, url=url)
    return rows[rows["round"] == round_tag].reset_index(drop=True)


def team_points(team: str | None, *, url: str | None = None) -> pd.DataFrame:
    """One team's submissions of every round with their MC@B (what its timeline traces draw), read by team."""
    rows = _store.team_submissions(team, url=url) if team else _store.submissions_frame(ids=[], url=url)
    return _ranking.with_mc_reference(rows, _ranking.mlp_variance(url=url))


def timeline_points(ids: list[str] | None = None, *, url: str | None = None) -> pd.DataFrame:
    """The field over time with each submission's MC@B: every graded one, or the submissions ``ids``."""
    rows = _store.timeline_field(url=url) if ids is None else _store.submissions_frame(ids=ids, url=url)
    return _ranking.with_mc_reference(rows, _ranking.mlp_variance(url=url))


def organizer_flag_count(table: pd.DataFrame) -> int:
    """How many teams of an organizer's board carry the overfitting signature (the flag's own decision)."""
    return _flags.count_flagged(table.to_dict("records"), ("overfit",))


@dataclass(frozen=True)
class FinalView:
    """A round's final record, its bootstrap and fragility views, and each finalist's public rank against its
    final one (the shake-up)."""

    record: dict
    views: _standings.StandingsViews
    shake: pd.DataFrame


def final_view(round_tag: str, *, url: str | None = None) -> FinalView | None:
    """What the board's final-standings section shows of ``round_tag``; None when no final was recorded."""
    found = _standings.final_views(round_tag)
    if found is None:
        return None
    record, views = found
    public = board(round_tag, _store.PUBLIC, organizer=False, url=url).table
    return FinalView(record, views, _standings.shake_up(public, record["standings"]))
