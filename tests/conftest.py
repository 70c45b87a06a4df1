"""Fixtures shared across the test packages."""

from __future__ import annotations

import os

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
