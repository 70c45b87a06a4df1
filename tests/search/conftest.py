"""Fixtures of the search tests: one shared cache per test session, never the user's ``~/.cache``."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory):
    """``CO_DESIGN_CACHE`` (:func:`search.cache.cache_dir`) in a temporary directory for the whole session.

    Shared by every test and by the jobs they start as subprocesses (they inherit the
    environment), so the stdlib corpus is built once per session, as on a user's machine.
    """
    path = tmp_path_factory.mktemp("co-design-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CO_DESIGN_CACHE", str(path))
        yield path
