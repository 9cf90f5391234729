"""Who a client is, for every per-client limit: the address the trusted front saw, an IPv6 client its /64,
never a header the client writes (User-Agent, cookies)."""

from __future__ import annotations

import flask
import pytest

from server.background import request_client_id, visitor_id
from server.identity import TrustedProxies, client_key


@pytest.mark.parametrize(("address", "key"), [
    ("203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("::ffff:198.51.100.4", "198.51.100.4"),
    ("fe80::1%eth0", "fe80::/64"),
    ("", "-"), (None, "-"), ("not an address", "-"),
])
def test_a_client_is_its_address_and_an_ipv6_client_its_64(address, key):
    assert client_key(address) == key


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    from whestboard.store import reset_engines

    reset_engines()
    yield
    reset_engines()


def _id_of(app: flask.Flask, peer: str, **headers: str) -> str | None:
    with app.test_request_context("/", environ_base={"REMOTE_ADDR": peer}, headers=headers):
        return request_client_id()


def test_every_header_a_client_writes_leaves_its_id_unchanged(store):
    app = flask.Flask(__name__)
    ids = {_id_of(app, "203.0.113.7", **{"User-Agent": f"agent {i}", "Cookie": f"c={i}",
                                         "Accept-Language": f"x-{i}"}) for i in range(20)}
    assert len(ids) == 1 and None not in ids
    assert ids == {visitor_id("203.0.113.7")}
    assert _id_of(app, "203.0.113.8") != _id_of(app, "203.0.113.7")
    # a fresh address from the same /64 per request is the same client; the next /64 is another
    assert {_id_of(app, f"2001:db8:5:6::{i:x}") for i in range(1, 50)} == {visitor_id("2001:db8:5:6::1")}
    assert _id_of(app, "2001:db8:5:7::1") != _id_of(app, "2001:db8:5:6::1")


def test_a_forwarded_address_counts_only_from_the_trusted_front(store):
    """X-Forwarded-For from an untrusted peer is dropped: the id is the peer's, whatever the header says."""
    proxies = TrustedProxies(None, ["unix"])
    assert proxies.client_of("203.0.113.7", "198.51.100.1") == "203.0.113.7"
    assert proxies.client_of("", "198.51.100.1") == "198.51.100.1"  # the serve.sh front, on its Unix socket
    assert proxies.client_of("", "198.51.100.9, 198.51.100.1") == "198.51.100.1"  # the front's own view wins
