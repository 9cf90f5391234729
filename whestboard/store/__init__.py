"""Where Whestboard keeps what it must not lose: the database engine, fork safety, atomic files.

Owns: the SQLAlchemy engine and sessions (SQLite in the state folder, or
``WHESTBOARD_DATABASE_URL``), the declarative ``Base`` every stored table is
declared on (by the package that owns the table), connections that never cross
a fork, the one atomic-write helper, the one artifact store (``blobs``: bytes every machine must see), and numbers made JSON-safe and written compactly (``values``: ``finite``, ``sci``). May import: ``whestboard.config``,
``whestboard.logs``. Imported by every package that stores something.
"""

from whestboard.store._atomic import create_exclusive, write_json, write_text, write_with
from whestboard.store._blobs import (
    BlobTooLarge,
    Quota,
    QuotaExceeded,
    blob_exists,
    blob_keys,
    blob_listing,
    blob_meta,
    fetch_blob_folder,
    get_blob,
    get_blob_arrays,
    locked,
    namespace_size,
    pack_files,
    prune_blobs,
    put_blob,
    put_blob_arrays,
    put_blob_folder,
    put_blob_within,
    remove_blob,
    shared_secret,
    stored_blob_keys,
)
from whestboard.store._database import Base, engine, reset_engines, session
from whestboard.store._values import DuplicateKey, finite, json_safe, sci, strict_json

__all__ = [
    "Base",
    "blob_exists",
    "blob_keys",
    "blob_listing",
    "blob_meta",
    "BlobTooLarge",
    "create_exclusive",
    "DuplicateKey",
    "engine",
    "fetch_blob_folder",
    "finite",
    "get_blob",
    "get_blob_arrays",
    "json_safe",
    "locked",
    "namespace_size",
    "pack_files",
    "prune_blobs",
    "put_blob_within",
    "Quota",
    "QuotaExceeded",
    "put_blob",
    "put_blob_arrays",
    "put_blob_folder",
    "remove_blob",
    "reset_engines",
    "sci",
    "session",
    "shared_secret",
    "stored_blob_keys",
    "strict_json",
    "write_json",
    "write_text",
    "write_with",
]
