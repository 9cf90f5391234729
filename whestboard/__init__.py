"""Whestboard's domain core: rounds, datasets, runs, bands and submissions.

Nothing in this package imports Dash; pages only wire its functions to the browser.
"""

__version__ = "0.1.0"
