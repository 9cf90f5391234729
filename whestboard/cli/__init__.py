"""Command-line entry point: ``python -m whestboard <command> ...``.

Each command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only lists them, so commands stay independent.
Errors a user can fix are printed as one line naming what to change, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bake": ("whestboard.cli.bake", "bake a compact dataset (seeds + Monte Carlo ground truth)"),
    "datasets": ("whestboard.cli.datasets", "list the datasets the app would serve"),
    "band": ("whestboard.cli.band", "measure a dataset's Monte Carlo convergence band (resumable)"),
    "import": ("whestboard.cli.submissions", "import graded submissions (CSV, Parquet, whest run --json)"),
    "export": ("whestboard.cli.submissions", "export every submission in the import schema (CSV)"),
    "sweep": ("whestboard.cli.sweep", "grade the baseline estimators on the embedded data as submissions"),
    "score": ("whestboard.cli.score", "score an estimator on a dataset's MLPs exactly as the grader would"),
    "compare": ("whestboard.cli.compare", "compare two runs or submissions paired on their shared MLPs (noise-aware)"),
    "check": ("whestboard.cli.check", "contract-check an estimator file in the sandbox (metered, stricter than whest validate)"),
}


class UserError(Exception):
    """An error caused by the user's input; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m whestboard", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except (UserError, ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
