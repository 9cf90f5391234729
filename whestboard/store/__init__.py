"""Where Whestboard keeps what it must not lose: the database engine, fork safety, atomic files.

Owns: the SQLAlchemy engine and sessions (SQLite in the state folder, or
``WHESTBOARD_DATABASE_URL``), the declarative ``Base`` every stored table is
declared on (by the package that owns the table), connections that never cross
a fork, the one atomic-write helper, the one artifact store (``blobs``: bytes every machine must see), and numbers made JSON-safe (``values``). May import: ``whestboard.config``,
``whestboard.logs``. Imported by every package that stores something.
"""

from whestboard.store import atomic, blobs, values
from whestboard.store.database import Base, engine, reset_engines, session
from whestboard.store.values import DuplicateKey, finite, json_safe, strict_json

__all__ = ["Base", "DuplicateKey", "atomic", "blobs", "engine", "finite", "json_safe", "reset_engines",
           "session", "strict_json", "values"]
