"""The one query-string builder: empties dropped, values kept, what it writes reads back as it was given."""

from urllib.parse import parse_qs, urlparse

from components.compare_panels import compare_url
from components.selectors import page_url
from components.url_state import href, query_string


def test_empty_values_are_left_out_and_the_rest_keep_their_order():
    assert query_string({"round": "v1", "team": None, "view": "", "highlight": "team:a"}) == \
        "?round=v1&highlight=team%3Aa"


def test_zero_and_false_are_values_not_empties():
    assert query_string({"seed": 0, "width": 8}) == "?seed=0&width=8"
    assert parse_qs(query_string({"flag": False})[1:]) == {"flag": ["False"]}


def test_no_value_left_gives_no_question_mark():
    assert query_string({}) == ""
    assert query_string({"a": None, "b": ""}) == ""
    assert href("/compare", {"a": None}) == "/compare"


def test_what_is_written_reads_back_unchanged():
    params = {"a": "sub:team & co/v2?x=1", "b": "base:toy-a:mean propagation", "c": "é+#%"}
    parsed = parse_qs(urlparse(href("/compare", params)).query)
    assert {k: v[0] for k, v in parsed.items()} == params
    assert urlparse(href("/compare", params)).path == "/compare"


def test_the_links_of_other_components_come_from_it():
    assert compare_url("run:1", None) == href("/compare", {"a": "run:1"}) == "/compare?a=run%3A1"
    assert page_url("/explorer", "toy-a", None, index=0) == "/explorer?dataset=toy-a&index=0"
    assert page_url("/explorer", None) == "/explorer"
