#!/usr/bin/env bash
# The whole web stack on one machine, as it should face the internet (docs/production.md#the-stack):
#   nginx on WHESTBOARD_HOST:WHESTBOARD_PORT (buffers slow clients, cuts bodies that lie about their
#   length, replaces X-Forwarded-For)  ->  gunicorn on a Unix socket in the state folder  ->  the app.
# Usage: ./scripts/serve.sh        (settings from WHESTBOARD_* variables; nginx: apt-get install nginx)
# Stops both on SIGTERM/SIGINT, and both when either exits.
#        ./scripts/serve.sh worker  a Celery worker for background jobs (needs WHESTBOARD_REDIS_URL), kept
#   alive by server/supervise.py: restarted whenever it exits unasked; WHESTBOARD_CELERY_CONCURRENCY
#   job processes (default 2); extra arguments go to `celery worker`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3 || command -v python); fi
BIN=$(dirname "$PY")
if [ "${1:-}" = worker ]; then
  shift
  CELERY="$BIN/celery"; [ -x "$CELERY" ] || CELERY=$(command -v celery)
  exec "$PY" -m server.supervise -- "$CELERY" -A worker worker --loglevel=INFO \
    --concurrency="${WHESTBOARD_CELERY_CONCURRENCY:-2}" "$@"
fi
GUNICORN="$BIN/gunicorn"; [ -x "$GUNICORN" ] || GUNICORN=$(command -v gunicorn)
NGINX=$(command -v nginx || true); [ -n "$NGINX" ] || NGINX=/usr/sbin/nginx
if [ ! -x "$NGINX" ]; then
  echo "serve.sh: nginx is not installed; install Debian's: apt-get install nginx" >&2
  exit 1
fi
FRONT=$("$PY" -m server.front)   # writes <state>/front/nginx.conf; prints that folder
"$NGINX" -t -q -p "$FRONT" -c "$FRONT/nginx.conf"

pids=()
stop() {
  trap - TERM INT EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait || true
}
trap stop TERM INT EXIT
"$GUNICORN" -c gunicorn.conf.py --bind "unix:$FRONT/gunicorn.sock" app:server &
pids+=($!)
"$NGINX" -p "$FRONT" -c "$FRONT/nginx.conf" &
pids+=($!)
set +e
wait -n "${pids[@]}"
status=$?
echo "serve.sh: $( [ "$status" = 0 ] && echo 'a server exited' || echo "a server exited with status $status"); stopping the other" >&2
exit "$status"
