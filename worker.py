"""Celery entry point for scale-out: ``celery -A worker worker``.

One Celery application (``whestboard.jobs.celery_app``) carries two kinds of task. Dash's
CeleryManager turns each background callback into a Celery task named after a hash of the callback's
source; a worker can only run it if it has
registered the very same callbacks. So this module builds the app exactly as
gunicorn does (``create_app`` registers every page's callbacks) and exposes the
Celery application they were registered on. The job bodies core packages spread over the workers
(``whestboard.jobs.spread``: a final's team batches) are registered by importing their package, which
building the app does too.

Needs ``WHESTBOARD_REDIS_URL`` (the broker and result store), and the same
``WHESTBOARD_DATABASE_URL`` and datasets as the web workers.
"""

from __future__ import annotations

import app as _dash_app
from whestboard.jobs import celery_app

celery = celery_app()
if celery is None:
    raise SystemExit("worker.py needs WHESTBOARD_REDIS_URL (e.g. redis://localhost:6379/0) to reach the broker")
_dash_app.the_app()  # registers every page's background callbacks as tasks
