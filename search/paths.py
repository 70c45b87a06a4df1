"""Where the configs and recipes live, and the OmegaConf resolver that points Hydra at recipes/."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "CONF_DIR", "RECIPES_DIR", "register_resolvers", "group_options", "unknown_group_option"]

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
RECIPES_DIR = REPO_ROOT / "recipes"


def register_resolvers() -> None:
    """``${co_design_recipes:}`` -> absolute path of recipes/ (used by ``hydra.searchpath``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("co_design_recipes"):
        OmegaConf.register_new_resolver("co_design_recipes", lambda: str(RECIPES_DIR))


def group_options(group: str) -> list[str]:
    """The options of a config group: ``conf/<group>/*.yaml`` (``experiment``: ``recipes/experiment/``)."""
    folder = (RECIPES_DIR if group == "experiment" else CONF_DIR) / group
    return sorted(p.stem for p in folder.glob("*.yaml"))


def unknown_group_option(args: list[str]) -> str | None:
    """A one-line error for a command-line ``group=option`` naming no file of the group, else None.

    Hydra reports these with its config search path and exit status 1; this check runs
    first and says only what matters (``unknown sampler 'nsga4' (sampler=nsga4); known:
    ...``). It stands aside when the command adds config directories of its own
    (``hydra.searchpath``, ``--config-dir``) and for sweeps (``sampler=tpe,nsga2``).
    """
    if any(a.startswith(("hydra.searchpath", "--config-dir", "-cd", "--config-path", "-cp")) for a in args):
        return None
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} | {"experiment"}
    for arg in args:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep or arg.startswith(("-", "~")) or key not in groups:
            continue
        if value in ("null", "") or any(c in value for c in ",()/${}"):
            continue
        known = group_options(key)
        if value not in known:
            where = "recipes/experiment/" if key == "experiment" else f"conf/{key}/"
            return f"unknown {key} {value!r} ({arg}); known: {', '.join(known)} (the files in {where})"
    return None
