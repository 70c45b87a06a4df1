"""Where the configs and recipes live, and the OmegaConf resolver that points Hydra at recipes/."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "CONF_DIR", "RECIPES_DIR", "register_resolvers"]

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
RECIPES_DIR = REPO_ROOT / "recipes"


def register_resolvers() -> None:
    """``${co_design_recipes:}`` -> absolute path of recipes/ (used by ``hydra.searchpath``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("co_design_recipes"):
        OmegaConf.register_new_resolver("co_design_recipes", lambda: str(RECIPES_DIR))
