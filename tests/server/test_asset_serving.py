"""Files of ``assets/`` go out brotli from the cache and, at a versioned address, are kept a year; the
plotly.js bundle and dash-ag-grid's main script are not in the page's script tags but are served."""

from __future__ import annotations

import re

import brotli
import pytest
import requests

from server.http import COMPRESS_MIN_SIZE
from tests.conftest import REPO

pytestmark = pytest.mark.services  # a live app server

ASSETS = REPO / "assets"


def _raw(base: str, path: str, encoding: str) -> requests.Response:
    response = requests.get(base + path, headers={"Accept-Encoding": encoding}, timeout=60, stream=True)
    response.raw.decode_content = False
    response._content = response.raw.read()
    return response


@pytest.fixture(scope="module")
def index(live_server) -> str:
    return requests.get(live_server + "/", timeout=60).text


def test_linked_assets_come_brotli_and_are_kept_a_year(live_server, index):
    linked = re.findall(r'(?:src|href)="(/assets/[^"?]+\?m=[^"]+)"', index)
    names = {u.split("?")[0].rsplit("/", 1)[-1] for u in linked}
    assert {"plotly_loader.js", "ag_grid_loader.js", "00-bootstrap.min.css", "favicon.ico"} <= names, names
    for url in linked:
        response = _raw(live_server, url, "gzip, deflate, br, zstd")
        assert response.status_code == 200
        assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable", url
        on_disk = (ASSETS / url.split("?")[0].removeprefix("/assets/")).read_bytes()
        if url.split("?")[0].endswith((".js", ".css")) and len(on_disk) >= COMPRESS_MIN_SIZE:
            assert response.headers["Content-Encoding"] == "br", url  # not a zstd stream made per request
            assert brotli.decompress(response.content) == on_disk
        else:
            assert response.content == on_disk


def test_the_plotly_bundle_is_served_at_the_loaders_address_but_not_linked(live_server, index):
    assert "plotly-whestboard.min.js" not in index
    version = re.search(r"var version = '([0-9a-f]+)';", (ASSETS / "plotly_loader.js").read_text()).group(1)
    response = _raw(live_server, f"/assets/plotly-whestboard.min.js?v={version}", "br")
    assert response.headers["Content-Encoding"] == "br"
    assert "max-age=31536000" in response.headers["Cache-Control"]
    assert brotli.decompress(response.content) == (ASSETS / "plotly-whestboard.min.js").read_bytes()
    assert len(response.content) < 500_000


def test_an_unversioned_asset_is_revalidated(live_server):
    assert "max-age=31536000" not in _raw(live_server, "/assets/plotly_loader.js", "br").headers["Cache-Control"]


def test_dash_ag_grids_main_script_tag_is_inert_and_its_address_served(live_server, index):
    tags = re.findall(r"<script [^>]*dash_ag_grid\.[^>]*>", index)
    assert len(tags) == 1 and 'type="whestboard/deferred"' in tags[0] and 'data-deferred-library="dash_ag_grid"' \
        in tags[0], tags
    src = re.search(r'src="([^"]+)"', tags[0]).group(1)
    response = _raw(live_server, src, "br")
    assert response.status_code == 200 and "max-age=31536000" in response.headers["Cache-Control"]
