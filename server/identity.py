"""Who a request comes from: the peer's address, or ``X-Forwarded-For`` only when a trusted proxy says so.

Per-client limits (jobs running, uploads queued, upload bytes stored) and the logs' hashed client rest on
this address, so a client must not be able to pick it: nothing else a request carries (User-Agent,
cookies, any other header) names a client, since the client chooses all of it. An IPv6 client is its /64
(:func:`client_key`): one subscriber holds a whole /64 and may use a fresh address from it per request. The header is believed only from ``WHESTBOARD_TRUSTED_PROXIES``
(default ``unix``: the front of ``scripts/serve.sh``, which reaches gunicorn over a Unix socket and
sets the header to the address it saw). From a trusted peer the client is the right-most entry that is
not itself a trusted proxy; anyone else's header is ignored.

werkzeug's ProxyFix trusts the last N hops whoever sent them, so a client reaching gunicorn directly
could still name itself; :class:`TrustedProxies` checks the peer first.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from flask import request

from whestboard import config

UNIX = "unix"


class TrustedProxies:
    """WSGI middleware: ``REMOTE_ADDR`` becomes the real client; ``X-Forwarded-For`` is dropped afterwards."""

    def __init__(self, app, trusted: Iterable[str]) -> None:
        self.app = app
        entries = [t.strip() for t in trusted if t.strip()]
        self.unix = any(t.lower() == UNIX for t in entries)
        self.networks = [ipaddress.ip_network(t, strict=False) for t in entries if t.lower() != UNIX]

    def is_trusted(self, address: str | None) -> bool:
        if not address:  # gunicorn names a Unix-socket peer with an empty address
            return self.unix
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in net for net in self.networks if net.version == ip.version)

    def client_of(self, peer: str | None, forwarded: str | None) -> str:
        if not self.is_trusted(peer) or not forwarded:
            return peer or ""
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        for hop in reversed(hops):
            if not self.is_trusted(hop):
                return hop
        return hops[0] if hops else (peer or "")

    def __call__(self, environ, start_response):
        environ["whestboard.peer"] = environ.get("REMOTE_ADDR", "")
        environ["REMOTE_ADDR"] = self.client_of(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"))
        environ.pop("HTTP_X_FORWARDED_FOR", None)  # nothing downstream can read the unverified chain
        return self.app(environ, start_response)


def install(server) -> None:
    """Wrap the Flask app once: every request's ``remote_addr`` is then the client's real address."""
    server.wsgi_app = TrustedProxies(server.wsgi_app, config.trusted_proxies())


#: An IPv6 client is its /64: the smallest block one subscriber is routinely given (RFC 6177), whose
#: 2^64 addresses privacy extensions rotate through at will. A holder of a /56 or /48 still appears as
#: 256 or 65,536 clients; the deployment-wide totals bound what they all get together.
IPV6_CLIENT_PREFIX = 64


def client_key(address: str | None) -> str:
    """Who an address stands for in a per-client limit: an IPv4 address itself, an IPv6 address's /64
    (an IPv4-mapped one its IPv4), anything unreadable (a Unix-socket peer with no trusted front) ``-``."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return "-"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        host_bits = 128 - IPV6_CLIENT_PREFIX
        return str(ipaddress.IPv6Network((int(ip) >> host_bits << host_bits, IPV6_CLIENT_PREFIX)))
    return str(ip)


def client_address() -> str | None:
    """The current request's client address (after :class:`TrustedProxies`), None outside a request."""
    try:
        return request.remote_addr
    except RuntimeError:
        return None
