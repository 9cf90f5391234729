"""Where Whestboard keeps what it must not lose: the database engine, fork safety, atomic files.

Owns: the SQLAlchemy engine and sessions (SQLite in the state folder, or
``WHESTBOARD_DATABASE_URL``), the declarative ``Base`` every stored table is
declared on (by the package that owns the table), connections that never cross
a fork, and the one atomic-write helper. May import: ``whestboard.config``,
``whestboard.logs``. Imported by every package that stores something.
"""

from whestboard.store import atomic
from whestboard.store.database import Base, engine, reset_engines, session

__all__ = ["Base", "atomic", "engine", "reset_engines", "session"]
