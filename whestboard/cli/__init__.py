"""Command-line entry point: ``python -m whestboard <command> ...``.

Each command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only lists them, so commands stay independent.
Errors a user can fix are printed as one line naming what to change, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bake": ("whestboard.cli._bake", "bake a compact dataset (seeds + Monte Carlo ground truth)"),
    "datasets": ("whestboard.cli._datasets", "list the datasets the app would serve"),
    "band": ("whestboard.cli._band", "measure a dataset's Monte Carlo convergence band (resumable)"),
    "import": ("whestboard.cli._submissions", "import graded submissions (CSV, Parquet, whest run --json)"),
    "export": ("whestboard.cli._submissions", "export every submission in the import schema (CSV)"),
    "sweep": ("whestboard.cli._sweep", "grade the baseline estimators on the embedded data as submissions"),
    "score": ("whestboard.cli._score", "score an estimator on a dataset's MLPs exactly as the grader would"),
    "curve": ("whestboard.cli._curve", "score an estimator at a ladder of budgets, each point exactly as score does"),
    "runs": ("whestboard.cli._runs", "list the recorded runs, newest first, with the ids compare takes"),
    "compare": ("whestboard.cli._compare", "compare two runs or submissions paired on their shared MLPs (noise-aware)"),
    "final": ("whestboard.cli._final", "the final evaluation: rerun nominated submissions on a fresh private suite, rank by the official rules"),
    "paper": ("whestboard.cli._paper", "measure the paper's figure: cumulant propagation's MSE/Var against FLOPs (resumable)"),
    "check": ("whestboard.cli._check", "contract-check an estimator file in the sandbox (metered, stricter than whest validate)"),
}


class UserError(Exception):
    """An error caused by the user's input; printed without a traceback."""


class UsageError(UserError):
    """The command line itself is wrong (argparse's complaint), raised instead of exiting."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(f"{parser.prog}: {message}")
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse's hook, raised so --json can answer in JSON
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m whestboard", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _print_json_error(code: str, message: str, stage: str) -> None:
    from whestboard.rules import cli_error

    print(json.dumps(cli_error(code, message, stage), indent=2))


def _input_code(exc: BaseException) -> str:
    """whest's own code for a refused package; INPUT_ERROR for any other input a user can fix."""
    from whestboard.rules import INPUT_ERROR
    from whestboard.sandbox import UploadError

    return "PACKAGING_VALIDATION_ERROR" if isinstance(exc, UploadError) else INPUT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run one command; with ``--json`` every failure, at any stage, is one ``{"ok": false, ...}`` object."""
    from whestboard.rules import INTERNAL_ERROR, USAGE_ERROR

    argv = sys.argv[1:] if argv is None else list(argv)
    wants_json = "--json" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        if wants_json:
            _print_json_error(USAGE_ERROR, str(exc), "arguments")
        else:
            exc.parser.print_usage(sys.stderr)
            print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)
        return 2
    wants_json = bool(getattr(args, "json", False))
    try:
        return int(args._module.run(args) or 0)
    except (UserError, ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if wants_json:
            _print_json_error(_input_code(exc), str(message), args.command)
        else:
            print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if wants_json:
            _print_json_error(INTERNAL_ERROR, "interrupted; re-run the same command to resume", args.command)
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - with --json a script still gets one object; without, the traceback
        if not wants_json:
            raise
        _print_json_error(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", args.command)
        return 1

__all__ = [
]
