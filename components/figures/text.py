"""Names people chose (teams, submission ids, estimator and upload labels) as a figure shows them: as text.

plotly draws every string of a figure (a trace's name in the legend, hover text and templates, a title, an
annotation, a tick label, cell text) through its own subset of HTML: ``<a href=...>`` becomes a working
link, ``<span style=...>`` restyles, ``<b>`` and ``<br>`` format. A team called
``<a href="https://evil.example">Team</a>`` must read as exactly those characters. So every user-supplied
string goes through :func:`plain` on its way into a figure: ``&``, ``<`` and ``>`` become entities, which
plotly decodes back into the characters and never into tags; ``{`` becomes ``&#123;``, so a name inside a
hover template is not read as a ``%{...}`` field either. Strings the app writes itself keep their markup.

Only what is *shown* is escaped: a value a callback reads back (a run id in ``customdata``) or a grouping
key stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "{": "&#123;"})


def plain(text: object) -> str:
    """``text`` as plotly will show it literally (None as an empty string)."""
    return "" if text is None else str(text).translate(_ENTITIES)


def plain_all(texts: Iterable[object]) -> list[str]:
    """:func:`plain` of each of ``texts`` (a column of names, the categories of an axis)."""
    return [plain(text) for text in texts]
