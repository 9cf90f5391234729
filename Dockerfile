# Whestboard: the WhestBench explorer and leaderboard, served by gunicorn.
#   docker build -t whestboard .
#   docker run -p 8050:8050 whestboard          # embedded data, zero configuration
# Scale out with docker-compose.yml (app + Celery worker + Redis + PostgreSQL).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WHESTBOARD_HOST=0.0.0.0 \
    WHESTBOARD_PORT=8050 \
    WHESTBOARD_STATE_DIR=/var/lib/whestboard

WORKDIR /app

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

# /healthz answers 200 only when datasets are readable and the store (and Redis, if set) reachable.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('WHESTBOARD_PORT', '8050'), timeout=8)"

CMD ["gunicorn", "-c", "gunicorn.conf.py", "app:server"]
