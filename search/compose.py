"""Compose the search job's config in Python (notebooks, tests) exactly as ``python -m search`` does.

>>> from search.compose import compose_config
>>> from search.app import run
>>> result = run(compose_config("n_trials=3", "tracking=off"), run_dir="outputs/nb")
"""

from __future__ import annotations

from typing import Any

__all__ = ["compose_config"]


def compose_config(*overrides: str) -> Any:
    """The composed DictConfig of ``python -m search <overrides>`` (Hydra's compose API)."""
    from hydra import compose, initialize_config_dir

    from search.config import register_configs
    from search.paths import CONF_DIR, register_resolvers

    register_configs()
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
