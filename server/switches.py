"""The deployment's switches as a page, a callback or a job sees them: one answer wherever it is asked.

``WHESTBOARD_ALLOW_UPLOADS`` decides whether this server stores and runs uploaded code. A request asks
through the app (which knows whether gunicorn serves it); a job process, which has no request, asks the
process itself (``config.served_process``: a job forked from a gunicorn worker, or a Celery worker, is
served). Every page, callback, job and API that stores or runs uploaded code asks :func:`uploads_on`
first, so an instance with uploads off runs none even when its store is shared with one where they are on.
"""

from __future__ import annotations

from flask import current_app, has_app_context

from whestboard import config


def uploads_on() -> bool:
    """Whether this server stores and runs uploaded estimators."""
    if has_app_context():
        return config.uploads_allowed(under_gunicorn=bool(current_app.config.get("WHESTBOARD_UNDER_GUNICORN")))
    return config.uploads_allowed()
