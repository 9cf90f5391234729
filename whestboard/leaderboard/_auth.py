"""Organizer access: import, edit and delete need the token in ``WHESTBOARD_ORGANIZER_TOKEN``.

Viewing is public. Without the variable set, organizer actions are disabled
outright (there is no default token to guess). Tokens are compared with
``hmac.compare_digest`` so the time taken does not reveal how much of a guess
was right. Every check happens on the server; the page only forwards what the
organizer typed.
"""

from __future__ import annotations

import hmac

from whestboard import config


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
