"""The SQL store: the authority for every fact in ira (Kafka only wakes people up).

SQLAlchemy Core on SQLite (WAL, default) or PostgreSQL (``IRA_DATABASE_URL``). Each module
owns one concern and takes an ``AsyncConnection`` so callers can put several concerns in one
transaction (inbox + state change + outbox is the usual trio).
"""
