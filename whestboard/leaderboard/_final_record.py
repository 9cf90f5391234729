"""The final evaluation's record: what a final decided, kept where every machine can read it.

The final (nominated submissions rerun on a fresh private suite) writes one record per round; the
standings view reads it. The record is the JSON ``final --json`` prints, plus the suite's per-MLP
scores that the bootstrap views resample, so what the page shows and what the command printed can
never disagree. One record per round: a new final replaces the old one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from whestboard.leaderboard import _store
from whestboard.store import get_blob, json_safe, put_blob

#: The artifact namespace of final records, keyed by round tag.
FINAL_RECORDS = "final-records"

#: Keys every record has. ``standings``: rows with ``rank``, ``team``, ``score``, ``final_layer_mse``,
#: ``all_layer_mse``, ``effective_compute``, ``n_mlps`` (more keys allowed); ``tie_breaks``: rows with
#: ``teams``, ``p_value``, ``extra_mlps``, ``decided_by`` (one of ``DECIDERS``); ``per_mlp``:
#: ``{"mlp_ids": [...], "scores": {team: [score per MLP, in mlp_ids order]}}`` on the base suite.
RECORD_KEYS = ("round", "suite_seed", "n_mlps", "standings", "tie_breaks", "per_mlp")
DECIDERS = ("score", "extra_mlps", "all_layer_mse", "effective_compute", "shared", "unresolved")


class BadFinalRecord(ValueError):
    """A final record that lacks what the standings view needs; the message names what is missing."""


def _checked(record: Mapping[str, Any]) -> dict[str, Any]:
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise BadFinalRecord(f"a final record needs {', '.join(missing)}; it has {', '.join(sorted(record))}")
    for tie in record["tie_breaks"]:
        if tie.get("decided_by") not in DECIDERS:
            raise BadFinalRecord(f"tie-break decided_by must be one of {', '.join(DECIDERS)}, "
                                 f"not {tie.get('decided_by')!r}")
    return dict(record)


def save_final_record(record: Mapping[str, Any]) -> None:
    """Keep ``record`` as its round's final (replacing an earlier one); raises BadFinalRecord."""
    checked = _checked(record)
    put_blob(FINAL_RECORDS, str(checked["round"]), json.dumps(json_safe(checked), allow_nan=False).encode())
    _store.count_board_change()  # the board shows the final's standings: its cached views are of the old record


def load_final_record(round_name: str) -> dict[str, Any] | None:
    """The round's final record, or None when no final has been run for it."""
    data = get_blob(FINAL_RECORDS, round_name)
    return None if data is None else json.loads(data)
