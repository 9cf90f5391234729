"""The app's plot style, installed as plotly's default template.

Naming a template in a figure's layout (``template="plotly_white"``) makes
plotly deep-copy and re-validate the whole template for that figure: about
14 ms, most of the build time of a small figure, paid again on every render.
The default template is applied almost for free, so the figure modules call
``use_app_template()`` at import and never name a template themselves.
"""

from __future__ import annotations

import plotly.io as pio

APP_TEMPLATE = "plotly_white"


def use_app_template() -> None:
    """Make the app's template plotly's default (idempotent)."""
    if pio.templates.default != APP_TEMPLATE:
        pio.templates.default = APP_TEMPLATE
