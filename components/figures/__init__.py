"""Pure figure builders: plain data in, ``go.Figure`` out (or plain trace dicts where speed needs them).

One module per page's figures, one frame-and-edge module they all use, and the app's plot style.
May import: ``whestboard`` for the data classes and pure helpers it builds from; never ``dash`` pages or
``server``.
"""
