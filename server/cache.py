"""The app's cache, shared by every worker: files in the state folder, or Redis when scaled out.

Pages memoize what several visitors ask for (figures, tables) through ``cache``; ``create_app`` binds it to
the server with ``cache_config()``.
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

