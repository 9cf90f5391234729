#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
# Usage: ./scripts/test.sh [pytest args]   (fast tier: ./scripts/test.sh -m "not browser and not services")
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
need=()
case " $* " in *"not browser and not services"*) fast_tier=1 ;; *) fast_tier= ;; esac
if [ -z "$fast_tier" ]; then  # the fast tier needs no browser and no server
  [ -x /usr/bin/chromium ] || need+=(chromium)
  command -v redis-server >/dev/null || need+=(redis-server)
  # The buffering front of scripts/serve.sh, which the front-door tests start.
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
  # PostgreSQL server binaries: the store tests start a throwaway cluster as the postgres user.
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || need+=(postgresql)
fi
if ((${#need[@]})); then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
# pip runs only when the pins changed since the last install (3.5 s saved on every other run).
pins="$(cat requirements.txt requirements-dev.txt | sha256sum)"
if [ "$(cat .venv/.installed-pins 2>/dev/null)" != "$pins" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
  printf '%s' "$pins" > .venv/.installed-pins
fi
# Python's default: the project's modules are compiled once and the bytecode reused, not compiled again in
# every test process, CLI run and sandbox worker (~40 s of CPU over the fast tier where the environment
# asks for no bytecode). The __pycache__ folders are git-ignored.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache  # the layering in pyproject.toml: one-way imports, no cycles
# The whole suite, asked for with nothing that selects tests, runs in two passes: the fast tier spread over
# the cores (pytest-xdist, tests/conftest.py), then the browser and services tests in one process, since
# their servers and timing-aware tests want the cores to themselves. Both passes run; either failing fails.
selects=
for arg in "$@"; do case "$arg" in -m|-m*|-k|-k*|--lf|--last-failed|--sw|tests*|*.py|*::*) selects=1 ;; esac; done
if [ -n "$selects" ]; then
  exec .venv/bin/python -m pytest "$@"
fi
status=0
.venv/bin/python -m pytest -m "not browser and not services" "$@" || status=$?
.venv/bin/python -m pytest -m "browser or services" "$@" || status=$?
exit "$status"
