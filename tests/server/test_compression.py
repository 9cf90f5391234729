"""Responses travel compressed (brotli where accepted, else gzip) and fingerprinted scripts stay cached a year."""

from __future__ import annotations

import gzip
import re

import brotli
import pytest
import requests

from tests.conftest import serve_app

pytestmark = pytest.mark.services  # a live app server


def _scripts(base: str) -> list[str]:
    index = requests.get(base + "/", timeout=60).text
    return re.findall(r'src="(/_dash-component-suites/[^"]+)"', index)


def _raw(base: str, path: str, encoding: str | None, **kw) -> requests.Response:
    """The response exactly as sent: requests must not decode it."""
    headers = {"Accept-Encoding": encoding or "identity"}
    response = requests.get(base + path, headers=headers, timeout=60, stream=True, **kw)
    response.raw.decode_content = False
    response._content = response.raw.read()
    return response


def _plotly_path(_base: str) -> str:
    return "/_dash-component-suites/plotly/package_data/plotly.min.js"


def test_scripts_come_back_in_the_encoding_the_browser_asked_for_and_decode_to_the_same_bytes(live_server):
    path = max(_scripts(live_server), key=len)
    plain = _raw(live_server, path, None)
    assert "Content-Encoding" not in plain.headers
    br = _raw(live_server, path, "gzip, deflate, br, zstd")
    assert br.headers["Content-Encoding"] == "br"
    assert brotli.decompress(br.content) == plain.content
    gz = _raw(live_server, path, "gzip")
    assert gz.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(gz.content) == plain.content
    assert len(br.content) < 0.5 * len(plain.content) and len(gz.content) < 0.5 * len(plain.content)
    assert "Accept-Encoding" in br.headers["Vary"]


def test_fingerprinted_scripts_keep_a_one_year_cache_lifetime_compressed(live_server):
    for path in _scripts(live_server):
        response = _raw(live_server, path, "br")
        assert response.status_code == 200
        if re.search(r"\.v[0-9_]+m[0-9]+\.", path):  # Dash's fingerprint
            assert "max-age=31536000" in response.headers.get("Cache-Control", ""), path


def test_plotly_and_callback_json_are_compressed(live_server):
    plotly = _raw(live_server, _plotly_path(live_server), "br")
    assert plotly.headers["Content-Encoding"] == "br" and len(plotly.content) < 2_000_000
    layout = _raw(live_server, "/_dash-layout", "gzip")
    assert layout.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(layout.content).startswith(b"{")


def test_the_compressed_copy_is_kept_per_resource_so_invented_fingerprints_grow_nothing():
    from types import SimpleNamespace

    from server import http

    script = "/_dash-component-suites/dash/deps/react@18.v4_4_1m1700000000.14.0.min.js"
    invented = script.replace("m1700000000", "m123")
    key = http.compression_key(SimpleNamespace(path=script))
    assert key == http.compression_key(SimpleNamespace(path=invented)) == "/_dash-component-suites/dash/deps/react@18.14.0.min.js"
    assert http.compression_key(SimpleNamespace(path="/_dash-update-component")) == "dynamic"
    cache = http.StaticAssetCache()
    cache.set("br;dynamic", b"callback answer")
    assert cache.get("br;dynamic") is None
    for n in range(3 * http.STATIC_KEYS_KEPT):
        cache.set(f"br;asset-{n}", b"x")
    assert len(cache) == http.STATIC_KEYS_KEPT and cache.get(f"br;asset-{3 * http.STATIC_KEYS_KEPT - 1}")


@pytest.fixture(scope="module")
def uncompressed_server(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("plain-state"), WHESTBOARD_COMPRESS="0") as base:
        yield base


def test_compression_can_be_left_to_a_proxy(uncompressed_server):
    path = max(_scripts(uncompressed_server), key=len)
    response = _raw(uncompressed_server, path, "br, gzip")
    assert "Content-Encoding" not in response.headers
