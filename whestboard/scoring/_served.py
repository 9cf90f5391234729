"""The estimators a browser may name: what this app serves, and never a path on the server.

``resolve_estimator`` is the command line's resolver: its user is trusted and local, so a spec may be a
file or folder (``score --estimator my_submission/``). Everything that arrives over HTTP goes through
:func:`served_spec` instead, which reads a spec as text and answers from what the app serves:

* the built-ins (``mean``, ``cov``, ``combined``, ``cumulant:K[:VARIANT]``, ``mc:N``, ``mc:0.5B``);
* ``upload:<sha256>``: an upload in the store, by its hash, only where uploads are on and the page runs
  them (the caller says so with ``uploads``);
* ``kept:NAME``: an estimator the operator keeps on the server (``WHESTBOARD_KEPT_ESTIMATORS``).

Anything else is refused with one sentence that does not depend on what exists on the disk: a visitor
cannot learn which folders or ``.py`` files the server has, nor make it copy one into the upload store.
A spec is at most ``MAX_SPEC_CHARS`` characters and a request names at most ``MAX_SPECS`` of them,
checked before any is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from whestboard import config
from whestboard.scoring._estimators import (
    ALIASES,
    BUILTIN_KINDS,
    CUMULANT_KINDS,
    builtin_choices,
    parse_cumulant_spec,
    parse_mc_spec,
    resolve_estimator,
)
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import RunError, quoted
from whestboard.scoring._sandboxed import sandboxed_handle

#: No served spec is longer (``upload:`` and 64 hex digits; a kept name; a Monte Carlo count).
MAX_SPEC_CHARS = 200
#: The most estimators one request may name (a page's whole menu is shorter).
MAX_SPECS = 12
UPLOAD_SPEC = re.compile(r"upload:([0-9a-f]{64})")
KEPT_SPEC = re.compile(r"kept:([A-Za-z0-9._-]{1,120})")
SERVED_HELP = ("mean, cov, combined, cumulant:1..3, mc:N or mc:0.5B, upload:SHA256 (an upload of this server, "
               "where uploads are on) or kept:NAME (an estimator the operator keeps on this server)")
UPLOADS_OFF = ("uploaded estimators are off on this server (WHESTBOARD_ALLOW_UPLOADS): it stores and runs no "
               "uploaded code; score yours with `python -m whestboard score --estimator PATH` on your machine")


def served_spec(spec: object, *, uploads: bool, refusal: str = UPLOADS_OFF) -> str:
    """``spec`` as the app will run it, when the app serves it; else RunError with one sentence.

    ``uploads``: whether this request may run uploaded code (the deployment's switch and the page's own
    rule together); ``refusal`` says why not when it may not. Nothing on the disk is looked at.
    """
    if not isinstance(spec, str):
        raise RunError(f"estimator {quoted(spec)} is not a name: use {SERVED_HELP}")
    text = spec.strip()
    if len(text) > MAX_SPEC_CHARS:
        raise RunError(f"estimator {quoted(text)} is too long to be one this server runs: use {SERVED_HELP}")
    key = ALIASES.get(text.lower(), text.lower())
    if key in BUILTIN_KINDS and key not in CUMULANT_KINDS:
        return key
    if key == "mc" or key.startswith("mc:"):
        parse_mc_spec(text)
        return text
    if key == "cumulant" or key.startswith("cumulant:"):
        parse_cumulant_spec(text)
        return text
    if UPLOAD_SPEC.fullmatch(text):
        if not uploads:
            raise RunError(f"{quoted(text)}: {refusal}")
        return text
    if match := KEPT_SPEC.fullmatch(text):
        if match.group(1) not in config.kept_estimators():
            raise RunError(f"{quoted(text)} is not an estimator this server keeps: "
                           f"{kept_help()}")
        return text
    raise RunError(f"unknown estimator {quoted(text)}: this server runs {SERVED_HELP}; a path on the server "
                   "is never looked up for a page")


def served_specs(specs: object, *, uploads: bool, refusal: str = UPLOADS_OFF, what: str = "estimators"
                 ) -> tuple[str, ...]:
    """A list of specs, bounded in number before any is read, each through :func:`served_spec`."""
    if specs is None:
        return ()
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        raise RunError(f"the {what} must be a list of names: use {SERVED_HELP}")
    if len(specs) > MAX_SPECS:
        raise RunError(f"{len(specs):,} {what} in one request: at most {MAX_SPECS} are scored at once")
    return tuple(dict.fromkeys(served_spec(s, uploads=uploads, refusal=refusal) for s in specs))


def kept_help() -> str:
    names = sorted(config.kept_estimators())
    return ("the operator keeps " + ", ".join(f"kept:{n}" for n in names)) if names else \
        "the operator keeps none (WHESTBOARD_KEPT_ESTIMATORS)"


def served_choices() -> list[dict]:
    """The lab's menu: the built-ins, then every estimator the operator keeps."""
    kept = [{"value": f"kept:{name}", "label": f"{name} (kept on this server, sandboxed)"}
            for name in sorted(config.kept_estimators())]
    return [*builtin_choices(), *kept]


def kept_target(spec: str) -> str | None:
    """The operator's path a ``kept:NAME`` spec stands for (a spec :func:`served_spec` accepted), else None."""
    match = KEPT_SPEC.fullmatch(spec)
    if not match:
        return None
    path = config.kept_estimators().get(match.group(1))
    if path is None:
        raise RunError(f"{quoted(spec)} is not an estimator this server keeps: {kept_help()}")
    return str(path)


def served_handle(spec: str, *, uploads: bool, refusal: str = UPLOADS_OFF,
                  should_cancel: Callable[[], bool] | None = None, round_tag: str | None = None) -> EstimatorHandle:
    """The run handle of a served spec (checked again here): built-ins in process, uploads and kept
    estimators in the sandbox."""
    text = served_spec(spec, uploads=uploads, refusal=refusal)
    target = kept_target(text)
    if target is not None:
        return sandboxed_handle(target, should_cancel=should_cancel, round_tag=round_tag)
    if text.startswith("upload:"):
        return sandboxed_handle(text, should_cancel=should_cancel, round_tag=round_tag)
    return resolve_estimator(text)


def is_sandboxed_spec(spec: str) -> bool:
    """Whether a served spec runs code in the sandbox (an upload or a kept estimator)."""
    return spec.startswith(("upload:", "kept:"))

