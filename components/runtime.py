"""Process-wide web plumbing: the flask-caching cache and background-job manager.

Defaults need no configuration (a file-system cache and a diskcache job queue
under the state folder) and are shared by every gunicorn worker on a machine.
"""

from __future__ import annotations

from flask_caching import Cache

from whestboard import settings

cache = Cache()


def cache_config() -> dict:
    redis = settings.redis_url()
    if redis:
        return {"CACHE_TYPE": "RedisCache", "CACHE_REDIS_URL": redis, "CACHE_DEFAULT_TIMEOUT": 0}
    return {
        "CACHE_TYPE": "FileSystemCache",
        "CACHE_DIR": str(settings.state_dir() / "flask-cache"),
        "CACHE_DEFAULT_TIMEOUT": 0,
        "CACHE_THRESHOLD": 5000,
    }


def background_callback_manager():
    """Dash background-callback manager: diskcache locally, Celery when Redis is set."""
    import diskcache
    from dash import DiskcacheManager

    jobs = diskcache.Cache(str(settings.state_dir() / "dash-jobs"))
    return DiskcacheManager(jobs)
