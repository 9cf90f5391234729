"""Organizer access: import, edit and delete need the token in ``WHESTBOARD_ORGANIZER_TOKEN``.

Viewing is public. Without the variable set, organizer actions are disabled
outright (there is no default token to guess). Tokens are compared with
``hmac.compare_digest`` so the time taken does not reveal how much of a guess
was right. Every check happens on the server; the page only forwards what the
organizer typed.

The token never leaves the web request that checks it. Work an organizer starts as a job (the final)
carries a *grant* instead (:func:`organizer_grant`): an HMAC, under a key kept in the store (never in
the job broker), of the exact request, an expiry and a digest of the token it was checked against.
The job's launcher and the job itself verify it (:func:`require_grant`); it cannot be stretched to
another request, is not launched past its expiry, dies with a change of token, and reveals nothing of the
token. A job once launched keeps its grant while it waits for a worker or is delivered again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from whestboard import config
from whestboard.store import shared_secret


class OrganizerDenied(PermissionError):
    """The request may not perform an organizer action; the message says why."""


def organizer_actions_enabled() -> bool:
    return config.organizer_token() is not None


def is_organizer(token: str | None) -> bool:
    """True only for the configured token (never when none is configured)."""
    expected = config.organizer_token()
    if expected is None or not token:
        return False
    return hmac.compare_digest(token.strip().encode("utf-8"), expected.encode("utf-8"))


def require_organizer(token: str | None) -> None:
    """Raise OrganizerDenied unless ``token`` is the organizer token."""
    if not organizer_actions_enabled():
        raise OrganizerDenied(
            "organizer actions are disabled on this server: set WHESTBOARD_ORGANIZER_TOKEN to enable them"
        )
    if not is_organizer(token):
        raise OrganizerDenied("missing or wrong organizer token")


def bearer_token(authorization_header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    if not authorization_header:
        return None
    scheme, _, value = authorization_header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


#: The store's shared secret (database, never Redis) that organizer grants are signed with.
GRANT_SECRET = "organizer-grants"
#: How long a grant stays good: the page launches its job at once; a later replay is refused.
GRANT_TTL_S = 600


def _grant_mac(subject: dict, expires: int) -> str:
    token = config.organizer_token() or ""
    body = json.dumps({"subject": subject, "expires": expires,
                       "token": hashlib.sha256(token.encode()).hexdigest()}, sort_keys=True, separators=(",", ":"))
    return hmac.new(shared_secret(GRANT_SECRET), body.encode(), hashlib.sha256).hexdigest()


def organizer_grant(token: str | None, subject: dict, *, now: float | None = None) -> str:
    """Check the token now and return the proof a job carries in its place: good for ``subject`` (the
    request's own fields, JSON values) only, for ``GRANT_TTL_S`` seconds. Raises OrganizerDenied."""
    require_organizer(token)
    expires = int((time.time() if now is None else now) + GRANT_TTL_S)
    return f"{expires}.{_grant_mac(subject, expires)}"


def require_grant(grant: object, subject: dict, *, now: float | None = None, admitted: bool = False) -> None:
    """Raise OrganizerDenied unless ``grant`` was issued by :func:`organizer_grant` for this very ``subject``,
    under the token configured now, and has not expired.

    ``admitted``: asked by the job itself, which its launcher admitted while the grant was good; the job
    checks the request and the token but not the clock, so a final that waited in the job queue behind other
    jobs, or is delivered again after its worker died, still runs (and resumes) instead of failing as expired."""
    if not organizer_actions_enabled():
        raise OrganizerDenied("organizer actions are disabled on this server: set WHESTBOARD_ORGANIZER_TOKEN "
                              "to enable them")
    expires, _, mac = str(grant or "").partition(".")
    if not expires.isdigit() or not hmac.compare_digest(mac.encode(), _grant_mac(subject, int(expires)).encode()):
        raise OrganizerDenied("this job carries no organizer grant for what it asks; start it from the page "
                              "with the organizer token")
    if not admitted and int(expires) < (time.time() if now is None else now):
        raise OrganizerDenied("this job's organizer grant has expired; start it again with the organizer token")
