"""The SQLAlchemy store (SQLite and PostgreSQL) behind the ``JobStore`` seam."""

from gateway.store.engine import database_is_current, make_engine, upgrade_database
from gateway.store.store import SqlJobStore, open_store

__all__ = ["SqlJobStore", "database_is_current", "make_engine", "open_store", "upgrade_database"]
