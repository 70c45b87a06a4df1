"""Fixtures shared across the test packages."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _postgres_answers() -> bool:
    try:
        import psycopg

        with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", connect_timeout=3):
            return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The local PostgreSQL test database (trust auth). Without one the test is skipped, except under
    CI=true, where CI has a database and its absence is a failure, not a skip."""
    if not _postgres_answers():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no PostgreSQL answers at 127.0.0.1:5432/test (start it: .ci/run does)")
        pytest.skip("no PostgreSQL at 127.0.0.1:5432/test")
    return POSTGRES_URL


@contextmanager
def _new_postgres_database() -> Iterator[str]:
    """A PostgreSQL database created for the caller and dropped afterwards: Optuna has not created its schema in
    it yet, as on a user's first run."""
    import psycopg

    name = f"co_design_{uuid.uuid4().hex[:12]}"
    admin = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def new_postgres_database(postgres_url):
    """Makes a new, empty PostgreSQL database per ``with new_postgres_database() as url:`` (dropped after)."""
    return _new_postgres_database
