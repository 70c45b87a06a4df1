"""What every reader returns: an Architecture, where it came from and how each field was read.

Also the typed attribute access the config-object readers share (a config may be a dataclass,
a plain object or a mapping, e.g. a LitGPT ``model_config.yaml`` loaded as a dict).
Imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from co_design.arch import Architecture, ArchitectureError

__all__ = ["ArchitectureInference", "ConfigFields"]

_MISSING = object()


@dataclass(frozen=True)
class ArchitectureInference:
    """An inferred architecture, where it came from and how each field was read.

    ``source`` is e.g. ``"attribute 'model.arch'"``, ``"HF config 'model.config'"``,
    ``"LitGPT config 'model.config'"`` or ``"module layers"``; ``evidence`` maps a field name to a
    short reason; ``guessed`` lists fields that are assumptions rather than readings.
    """

    architecture: Architecture
    source: str
    evidence: Mapping[str, str] = field(default_factory=dict)
    guessed: tuple[str, ...] = ()

    def describe(self) -> str:
        """One human-readable line: the architecture's shape and how each field was found."""
        a = self.architecture
        shape = (
            f"hidden={a.hidden}, layers={a.layers}, heads={a.heads}, kv_heads={a.kv_heads}, "
            f"head_dim={a.head_dim}, ffn={a.ffn}, vocab={a.vocab}, gated_ffn={a.gated_ffn}, "
            f"tied_embeddings={a.tied_embeddings}"
        )
        if a.is_moe:
            shape += (
                f", experts={a.experts}, experts_per_token={a.experts_per_token}, expert_ffn={a.expert_ffn}, "
                f"shared_experts={a.shared_experts}"
            )
        text = f"architecture inferred from {self.source}: {shape}"
        if self.evidence:
            text += " [" + "; ".join(f"{k}: {v}" for k, v in self.evidence.items()) + "]"
        if self.guessed:
            text += (
                f" -- GUESSED (not readable from the module): {', '.join(self.guessed)}; "
                "pass architecture=Architecture(...) to CoDesignCallback to be exact"
            )
        return text


class ConfigFields:
    """Typed reads of a config object or mapping; errors name the library and the attribute."""

    def __init__(self, config: Any, library: str) -> None:
        self.config, self.library = config, library

    def get(self, key: str, default: Any = None) -> Any:
        if isinstance(self.config, Mapping):
            return self.config.get(key, default)
        return getattr(self.config, key, default)

    def has(self, *keys: str) -> bool:
        return all(self.get(k, _MISSING) is not _MISSING for k in keys)

    def fail(self, msg: str) -> ArchitectureError:
        return ArchitectureError(f"{self.library} config: {msg}")

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> Any:
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.fail(f"missing {key!r}, needed to describe the model")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{key} must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{key} must be a number, got {value!r}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"{key} must be True or False, got {value!r}")
        return value

    def build(self, kwargs: dict[str, Any]) -> Architecture:
        """The Architecture of ``kwargs``; an inconsistency names the library."""
        try:
            return Architecture(**kwargs)
        except ArchitectureError as exc:
            raise self.fail(str(exc)) from None
