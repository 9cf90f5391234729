"""``python -m whestboard``: see ``whestboard.cli``."""

from whestboard.cli import main

raise SystemExit(main())
