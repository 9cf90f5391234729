"""The flask-caching cache that ``pages/leaderboard.py`` still memoizes through (files in the state folder,
or Redis when scaled out); ``create_app`` binds it to the server with ``cache_config()``.

Every other cache is a region of the one cache service, ``whestboard.cache``; the leaderboard page moves to
its ``memoize`` decorator, and then this module and flask-caching go.
"""

from __future__ import annotations

from flask_caching import Cache

from whestboard import config

cache = Cache()


def cache_config() -> dict:
    redis = config.redis_url()
    if redis:
        return {
            "CACHE_TYPE": "RedisCache",
            "CACHE_REDIS_URL": redis,
            "CACHE_KEY_PREFIX": "whestboard-cache:",
            "CACHE_DEFAULT_TIMEOUT": 0,
        }
    return {
        "CACHE_TYPE": "FileSystemCache",
        "CACHE_DIR": str(config.state_dir() / "flask-cache"),
        "CACHE_DEFAULT_TIMEOUT": 0,
        "CACHE_THRESHOLD": 5000,
    }

