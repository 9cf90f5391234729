"""Datasets kept from the playground: how many there may be, whose each is, and who may drop one.

"Keep this MLP" makes a one-MLP dataset every machine serves (``whestboard.data._registry``, namespace
``kept-dataset`` of the shared artifact store), so keeping is bounded: at most ``max_count`` in all,
``per_client`` per visitor and ``max_bytes`` in the store (``config.kept_datasets_limits``,
``WHESTBOARD_KEPT_*``). Each is recorded with the hashed id of the visitor who kept it; that visitor or
the organizer may drop it, nobody else.

The bound holds at every moment, not only when checked: a keep is refused before any work when there
is no room, and a keep that finds itself past a bound once stored (two visitors keeping at once) removes
itself, so the earliest keeps are the ones that stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from whestboard import config
from whestboard.data._registry import KEPT, forget_kept
from whestboard.store import blob_listing

#: What a kept dataset's record weighs beyond its truth (manifest, names, the tar's headers), for the check
#: made before it is baked.
KEPT_OVERHEAD_BYTES = 64 << 10


class KeepRefused(ValueError):
    """A keep or a drop this server does not do; the message says why and what to do instead."""


@dataclass(frozen=True)
class KeptLimits:
    """How many datasets may be kept, per visitor, and their bytes (docs/production.md)."""

    max_count: int = 64
    per_client: int = 8
    max_bytes: int = 256 << 20

    @classmethod
    def from_env(cls) -> KeptLimits:
        return cls(**config.kept_datasets_limits())


@dataclass(frozen=True)
class Kept:
    """One kept dataset as the store lists it."""

    name: str
    owner: str | None
    size: int
    created_at: float


def kept_datasets() -> list[Kept]:
    """Every kept dataset, oldest first."""
    return [Kept(row["key"], row.get("owner"), row["size"], row["created_at"]) for row in blob_listing(KEPT)]


def estimated_bytes(width: int, depth: int) -> int:
    """A kept dataset's size before it is baked: its float32 truth plus the record's overhead."""
    return 4 * int(width) * int(depth) + KEPT_OVERHEAD_BYTES


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.2f} MiB"


def check_room(owner: str | None, width: int, depth: int, *, limits: KeptLimits | None = None) -> None:
    """Refuse (``KeepRefused``) a new kept dataset of ``owner``, of this shape, when a bound would be passed."""
    limits = limits or KeptLimits.from_env()
    adding_bytes = estimated_bytes(width, depth)
    kept = kept_datasets()
    if len(kept) >= limits.max_count:
        raise KeepRefused(f"this server keeps at most {limits.max_count} datasets made in the playground "
                          f"(WHESTBOARD_KEPT_MAX) and holds {len(kept)}: drop one of yours, or ask the organizer "
                          "to drop some")
    if owner is not None:
        mine = sum(1 for k in kept if k.owner == owner)
        if mine >= limits.per_client:
            raise KeepRefused(f"you have kept {mine} datasets, this server's limit per visitor "
                              f"(WHESTBOARD_KEPT_PER_CLIENT = {limits.per_client}): drop one of yours first")
    held = sum(k.size for k in kept)
    if held + adding_bytes > limits.max_bytes:
        raise KeepRefused(f"the kept datasets hold {_mib(held)} and this one needs about {_mib(adding_bytes)}, past "
                          f"this server's {_mib(limits.max_bytes)} (WHESTBOARD_KEPT_MAX_MB): drop one of yours, or "
                          "ask the organizer to drop some")


def past_bounds(name: str, *, limits: KeptLimits | None = None) -> str | None:
    """Why the stored kept dataset ``name`` lies past a bound counting from the oldest, or None when it fits."""
    limits = limits or KeptLimits.from_env()
    kept = kept_datasets()
    position = next((i for i, k in enumerate(kept) if k.name == name), None)
    if position is None:
        return None
    this = kept[position]
    earlier = kept[:position + 1]
    if position >= limits.max_count:
        return f"this server keeps at most {limits.max_count} datasets made in the playground (WHESTBOARD_KEPT_MAX)"
    if this.owner is not None and sum(1 for k in earlier if k.owner == this.owner) > limits.per_client:
        return f"the limit per visitor is {limits.per_client} kept datasets (WHESTBOARD_KEPT_PER_CLIENT)"
    if sum(k.size for k in earlier) > limits.max_bytes:
        return f"the kept datasets may hold {_mib(limits.max_bytes)} (WHESTBOARD_KEPT_MAX_MB)"
    return None


def kept_owner(name: str) -> str | None:
    found = next((k for k in kept_datasets() if k.name == name), None)
    if found is None:
        raise KeepRefused(f"no kept dataset {name[:120]!r}")
    return found.owner


def drop_kept(name: str, *, owner: str | None, organizer: bool = False) -> None:
    """Delete kept dataset ``name`` on every machine when ``owner`` kept it or the organizer asks; else
    ``KeepRefused`` saying why (someone else's, kept before owners were recorded, or no such dataset)."""
    if not isinstance(name, str) or not name:
        raise KeepRefused("name a kept dataset to drop")
    kept_by = kept_owner(name)
    if not organizer and (kept_by is None or kept_by != owner):
        raise KeepRefused(f"kept dataset {name!r} is not yours to drop: only the visitor who kept it, or the "
                          "organizer, can drop it")
    forget_kept(name)
