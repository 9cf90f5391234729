#!/usr/bin/env bash
# Rebuild the embedded data in data/: one compact dataset per round.
# Resumable: kill it at any point and run it again; finished MLPs are kept.
# Takes about two hours on a 2-core machine, most of it the 1024 x 16 round.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SAMPLES=${SAMPLES:-1048576}   # 2^20 reference samples per MLP
$PY -m whestboard bake --round v1-warmup --n-mlps 32 --samples "$SAMPLES" --out data/v1-warmup
$PY -m whestboard bake --round v1-phase1 --n-mlps 16 --samples "$SAMPLES" --out data/v1-phase1
$PY -m whestboard bake --round v2-phase2 --n-mlps 8 --samples "$SAMPLES" --out data/v2-phase2
