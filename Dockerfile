# Whestboard: the WhestBench explorer and leaderboard, served by nginx before gunicorn (scripts/serve.sh).
#   docker build -t whestboard .
#   docker run -p 8050:8050 whestboard          # embedded data, zero configuration
# Scale out with docker-compose.yml (app + Celery worker + Redis + PostgreSQL);
#   docker run whestboard ./scripts/serve.sh worker   # a supervised Celery worker (needs WHESTBOARD_REDIS_URL)
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WHESTBOARD_HOST=0.0.0.0 \
    WHESTBOARD_PORT=8050 \
    WHESTBOARD_STATE_DIR=/var/lib/whestboard

WORKDIR /app

# The buffering front (scripts/serve.sh): Debian's nginx, run unprivileged with its files in the state folder.
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx-light \
 && rm -rf /var/lib/apt/lists/*

# Dependencies first: this layer is reused until requirements.txt changes.
COPY requirements.txt .
RUN pip install -r requirements.txt

# A non-root user that owns only the state folder; the code and data stay read-only to it.
RUN groupadd --system whestboard \
 && useradd --system --gid whestboard --home-dir /var/lib/whestboard --shell /usr/sbin/nologin whestboard \
 && mkdir -p /var/lib/whestboard \
 && chown whestboard:whestboard /var/lib/whestboard

COPY . .
USER whestboard

EXPOSE 8050
VOLUME ["/var/lib/whestboard"]

# /healthz (through the front) answers 200 only when datasets are readable and the store (and Redis) reachable.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('WHESTBOARD_PORT', '8050'), timeout=8)"

# nginx on WHESTBOARD_PORT, gunicorn (gunicorn.conf.py) behind it on a Unix socket: docs/production.md#the-stack
CMD ["./scripts/serve.sh"]
