"""The GPU catalog: one YAML file per GPU, every number with its source.

File format (``co_design/hardware/data/b200.yaml`` is the reference)::

    name: my-gpu                 # lookup key (case-insensitive)
    base: b200                   # optional: start from another GPU and override some numbers
    aliases: [my-gpu-sxm]
    sms: {value: 148, source: "vendor datasheet"}
    peak_flops_per_s:
      bf16: {value: 2250.0e12, source: "..."}
    precisions:                  # formats real kernels run natively, per tensor class
      weights: {value: [bf16, fp8, nvfp4], source: "..."}
      activations: {value: [bf16, fp8, nvfp4], source: "..."}
      kv_cache: {value: [bf16, fp8, nvfp4], source: "..."}
    ...

A number may also be written bare (``sms: 148``); it is then recorded with the
source ``"user file <path>"``. A file whose ``name`` is already in the catalog
and that has no ``base`` overrides that GPU's numbers (``base`` defaults to it).

``precisions`` (formats with real kernels per tensor class) is the table
:func:`co_design.hardware.check_precision` reads; a GPU without one (and without
a ``base`` to inherit it from) runs each class in every format it has a
``peak_flops_per_s`` rate for.

User GPUs: :func:`load_gpu` reads one file; every ``*.yaml`` / ``*.yml`` in the
directories of the ``CO_DESIGN_HARDWARE_PATH`` environment variable
(``os.pathsep``-separated) joins the catalog of :func:`list_gpus` / :func:`get_gpu`.

This module imports no torch and no numpy.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from co_design.precision import PRECISIONS as _NARROW_FIRST

__all__ = ["GPU", "get_gpu", "list_gpus", "load_gpu", "HARDWARE_PATH_ENV"]

HARDWARE_PATH_ENV = "CO_DESIGN_HARDWARE_PATH"
PRECISIONS = _NARROW_FIRST[::-1]  # co_design.precision's formats, widest first (the order the tables list them)
_DATA_DIR = Path(__file__).with_name("data")
PRECISION_FIELDS = ("weights", "activations", "kv_cache")  # tensor classes a deployment sets a format for


@dataclass(frozen=True, eq=True)
class GPU:
    """One GPU's numbers (SI units: bytes, FLOP/s, bytes/s, seconds, watts).

    Peaks are dense (no 2:4 sparsity). ``peak_flops_per_s`` maps a math
    precision (``"bf16"``, ``"fp8"``, ``"nvfp4"``) to FLOP/s; a missing key means
    the GPU has no tensor-core path at that precision. Efficiency fields are the
    achievable fractions the performance model applies to peaks.
    ``precisions`` maps each tensor class (``"weights"``, ``"activations"``,
    ``"kv_cache"``) to the formats the GPU runs natively, i.e. with real serving
    kernels (not emulated by widening to another format); weight and activation
    formats need a ``peak_flops_per_s`` rate. Empty: every format with a rate.
    ``gemm_tiles`` lists the output tiles of its GEMM kernels as
    ``(rows, cols, sms_per_tile, rate)``; 2-SM tiles (Blackwell CTA pairs) occupy
    two SMs, and ``rate`` is the fraction of the per-SM tensor-core peak the tile's
    main loop reaches (1.0 when omitted; e.g. 0.5 for Blackwell's 64-row MMA, which
    uses half the tensor-core datapath). ``stream_k``: the GEMM library can split
    the K loop of the whole problem evenly over the SMs (stream-K / persistent
    scheduling), which smooths wave quantization at the cost of fp32 partial-tile
    fix-ups. ``attention_head_dims``: head sizes the runtime's fused attention
    kernels implement; another head size pads up to the next one (empty: any).
    ``gemm_efficiency_by_precision`` gives the fraction of a precision's own peak
    that large GEMMs reach where it differs from ``gemm_efficiency`` (measured fp8
    and nvfp4 GEMMs run further below their peaks than bf16 ones); a precision it
    does not list uses ``gemm_efficiency``.
    ``prefill_attention`` maps an attention precision (``bf16``, or ``fp8`` for the FP8
    context FMHA an FP8 KV cache runs) to ``(fraction, overhead)`` of the causal prompt
    attention kernel: ``fraction`` of that precision's own dense peak reached by its
    tile loop, ``overhead`` the time of that many 128x128 KV tiles paid once per
    128-row query tile (so short prompts run below the long-prompt rate); a
    precision it does not list runs at ``attention_efficiency`` of the peak at
    every length (``co_design.perf.ops``; ``benchmarks/fit_prefill_attention.py``
    fits the built-in entries on published kernel timings). ``prefill_mla`` does the same for
    MLA's prompt kernel (every head over its own expanded key and value, DeepSeek-V3's
    192 + 128 head dims); an MLA model whose precision it does not list takes
    ``prefill_attention``'s entry.
    ``decode_attention`` maps a KV-cache format to ``(fraction, cta_s, ramp_s,
    ramp_bytes)`` of the decode attention kernel (one query token per sequence over its
    cached KV): it streams the cache at ``fraction`` of ``hbm_bytes_per_s``, pays
    ``cta_s`` seconds for each wave of its CTAs (one per sequence and KV head) over the
    SMs, however short the cache, and ``ramp_s`` for its stream's ramp once the SMs
    stream ``ramp_bytes`` each, in proportion below that (a file may give the first two
    alone: no ramp; ``co_design.perf.ops.decode_attention_time_s``); a format it does not
    list takes the entry of the narrowest wider format that has one
    (:meth:`decode_attention_law`), else streams at ``memory_efficiency`` with no per-CTA
    cost (``benchmarks/fit_decode_attention.py`` fits the built-in entries).
    ``decode_mla`` does the same for the absorbed MLA decode kernel (every query head over
    one shared latent cache, whose math can bind where a grouped-query kernel's cannot):
    a KV-cache format maps to ``(compute_fraction, fraction, io_fraction, cta_s)``, the
    kernel taking the longer of its FLOPs at ``compute_fraction`` of the bf16 dense peak
    (above 1 where it runs FP8 MMAs over an FP8 cache; at most the GPU's fastest dense
    peak) and its bytes, the latent cache at ``fraction`` of ``hbm_bytes_per_s`` and the
    per-head queries and outputs (bf16 whatever the cache's format) at ``io_fraction``,
    plus ``cta_s`` per wave of CTAs (one per sequence); a format it does not list takes
    the narrowest wider format's (:meth:`decode_mla_law`), else an MLA model decodes
    under ``decode_attention``.
    ``sources`` maps each field name (``peak_flops_per_s.bf16`` for nested ones)
    to where its number comes from.
    """

    name: str
    sms: int
    peak_flops_per_s: Mapping[str, float]
    hbm_bytes: float
    hbm_usable_bytes: float
    hbm_bytes_per_s: float
    l2_bytes: float
    nvlink_bytes_per_s: float  # per GPU, per direction
    nvlink_domain: int  # GPUs reachable over NVLink
    scaleout_bytes_per_s: float  # per GPU, per direction, beyond the NVLink domain
    tdp_w: float = 0.0
    precisions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gemm_efficiency: float = 0.8  # achievable fraction of peak FLOP/s for large GEMMs
    gemm_efficiency_by_precision: Mapping[str, float] = field(default_factory=dict)  # overrides per precision
    attention_efficiency: float = 0.65  # achievable fraction of peak for fused attention math
    prefill_attention: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # precision -> kernel law
    prefill_mla: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # precision -> MLA prompt law
    decode_attention: Mapping[str, tuple[float, float, float, float]] = field(default_factory=dict)  # KV -> law
    decode_mla: Mapping[str, tuple[float, float, float, float]] = field(default_factory=dict)  # KV format -> MLA law
    memory_efficiency: float = 0.85  # achievable fraction of HBM bandwidth
    kernel_overhead_s: float = 3e-6  # fixed cost per kernel (launch gap, prologue, tail)
    collective_latency_s: float = 10e-6  # seconds per synchronization step of a collective / point-to-point
    collective_efficiency: float = 0.8  # achieved bus bandwidth of collectives over the link's per-direction peak
    gemm_tiles: tuple[tuple[int, int, int, float], ...] = ((128, 128, 1, 1.0), (128, 256, 1, 1.0))
    stream_k: bool = True
    attention_head_dims: tuple[int, ...] = ()
    k_tile_bytes: int = 128  # bytes of K per pipeline stage; K pads to a multiple of it
    aliases: tuple[str, ...] = ()
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        try:
            by_precision = {p: float(v) for p, v in dict(self.gemm_efficiency_by_precision).items()}
        except (TypeError, ValueError):
            raise ValueError(f"GPU {self.name!r}: gemm_efficiency_by_precision must map precision -> number, got "
                             f"{self.gemm_efficiency_by_precision!r}") from None
        object.__setattr__(self, "gemm_efficiency_by_precision", MappingProxyType(by_precision))
        for key, terms, sizes in (("prefill_attention", "precision -> [fraction, overhead]", (2,)),
                                  ("prefill_mla", "precision -> [fraction, overhead]", (2,)),
                                  ("decode_attention", "KV-cache format -> [fraction, cta_s] or [fraction, cta_s, "
                                   "ramp_s, ramp_bytes]", (2, 4)),
                                  ("decode_mla", "KV-cache format -> [compute_fraction, fraction, io_fraction, cta_s]",
                                   (4,))):
            given = getattr(self, key)
            try:  # a shorter form pads with zeros (a decode law without a ramp)
                law = {p: tuple(float(x) for x in v) + (0.0,) * (sizes[-1] - len(v))
                       for p, v in dict(given).items() if len(v) in sizes}
                if len(law) != len(given):
                    raise ValueError
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"GPU {self.name!r}: {key} must map {terms}, got {given!r}") from None
            object.__setattr__(self, key, MappingProxyType(law))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "gemm_tiles", tuple(self._checked_tile(t) for t in self.gemm_tiles))
        object.__setattr__(self, "attention_head_dims", tuple(sorted(int(d) for d in self.attention_head_dims)))
        object.__setattr__(self, "stream_k", bool(self.stream_k))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        bad = sorted(set(self.peak_flops_per_s) - set(PRECISIONS))
        if bad:
            raise ValueError(f"GPU {self.name!r}: unknown precision(s) {bad} in peak_flops_per_s; use {PRECISIONS}")
        if not self.peak_flops_per_s:
            raise ValueError(f"GPU {self.name!r}: peak_flops_per_s needs at least one of {PRECISIONS}")
        object.__setattr__(self, "precisions", MappingProxyType(self._checked_precisions()))
        for key in ("sms", "nvlink_domain", "k_tile_bytes"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"GPU {self.name!r}: {key} must be >= 1, got {getattr(self, key)}")
        for key in ("hbm_bytes", "hbm_usable_bytes", "hbm_bytes_per_s", "nvlink_bytes_per_s", "scaleout_bytes_per_s"):
            if not float(getattr(self, key)) > 0:
                raise ValueError(f"GPU {self.name!r}: {key} must be > 0, got {getattr(self, key)}")
        if float(self.hbm_usable_bytes) > float(self.hbm_bytes):
            raise ValueError(f"GPU {self.name!r}: hbm_usable_bytes={self.hbm_usable_bytes:.4g} exceeds hbm_bytes="
                             f"{self.hbm_bytes:.4g}; both are bytes (a datasheet's '80 GB' of HBM is 80 GiB = 80 * 2**30)")
        for key in ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "collective_efficiency"):
            v = float(getattr(self, key))
            if not 0 < v <= 1:
                raise ValueError(f"GPU {self.name!r}: {key} must be in (0, 1], got {v}")
        for prec, v in self.gemm_efficiency_by_precision.items():
            if prec not in self.peak_flops_per_s:
                raise ValueError(f"GPU {self.name!r}: gemm_efficiency_by_precision.{prec} is given but "
                                 f"peak_flops_per_s has no {prec} rate; use one of {sorted(self.peak_flops_per_s)}")
            if not 0 < v <= 1:
                raise ValueError(f"GPU {self.name!r}: gemm_efficiency_by_precision.{prec} must be in (0, 1], got {v}")
        for key in ("prefill_attention", "prefill_mla"):
            for prec, (frac, overhead) in getattr(self, key).items():
                if prec not in self.peak_flops_per_s:
                    raise ValueError(f"GPU {self.name!r}: {key}.{prec} is given but peak_flops_per_s has no "
                                     f"{prec} rate; use one of {sorted(self.peak_flops_per_s)}")
                if not 0 < frac <= 1 or not overhead >= 0:
                    raise ValueError(f"GPU {self.name!r}: {key}.{prec} needs a fraction in (0, 1] and an "
                                     f"overhead >= 0 (KV tiles per query tile), got [{frac}, {overhead}]")
        for prec, (frac, cta_s, ramp_s, ramp_bytes) in self.decode_attention.items():
            if prec not in PRECISIONS:
                raise ValueError(f"GPU {self.name!r}: decode_attention.{prec} is not a KV-cache format; use one of "
                                 f"{PRECISIONS}")
            if not 0 < frac <= 1 or not cta_s >= 0:
                raise ValueError(f"GPU {self.name!r}: decode_attention.{prec} needs a fraction of the HBM bandwidth "
                                 f"in (0, 1] and seconds per wave of CTAs >= 0, got [{frac}, {cta_s}]")
            if not ramp_s >= 0 or not ramp_bytes >= 0 or (ramp_s > 0) != (ramp_bytes > 0):
                raise ValueError(f"GPU {self.name!r}: decode_attention.{prec} needs its ramp as seconds >= 0 and the "
                                 f"bytes per SM that pay it in full, both > 0 or both 0 (no ramp), got "
                                 f"[{ramp_s}, {ramp_bytes}]")
        for prec, (compute, frac, io_frac, cta_s) in self.decode_mla.items():
            if prec not in PRECISIONS:
                raise ValueError(f"GPU {self.name!r}: decode_mla.{prec} is not a KV-cache format; use one of "
                                 f"{PRECISIONS}")
            bf16 = self.peak_flops_per_s.get("bf16")
            top = max(self.peak_flops_per_s.values()) / bf16 if bf16 else 0.0
            if not 0 < compute <= top * (1 + 1e-9) or not 0 < frac <= 1 or not 0 < io_frac <= 1 or not cta_s >= 0:
                raise ValueError(f"GPU {self.name!r}: decode_mla.{prec} needs a fraction of the bf16 peak in (0, "
                                 f"{top:g}] (a bf16 rate is required; above 1 only up to the GPU's fastest dense "
                                 f"peak), two fractions of the HBM bandwidth in (0, 1] and seconds per wave of CTAs "
                                 f">= 0, got [{compute}, {frac}, {io_frac}, {cta_s}]")
        for key in ("kernel_overhead_s", "collective_latency_s", "l2_bytes", "tdp_w"):
            if not float(getattr(self, key)) >= 0:
                raise ValueError(f"GPU {self.name!r}: {key} must be >= 0, got {getattr(self, key)}")
        if not self.gemm_tiles:
            raise ValueError(f"GPU {self.name!r}: gemm_tiles needs at least one [rows, cols, sms_per_tile] entry")
        if any(d < 1 for d in self.attention_head_dims):
            raise ValueError(f"GPU {self.name!r}: attention_head_dims must be positive, got {self.attention_head_dims}")

        object.__setattr__(self, "_hash", hash(tuple(
            tuple(sorted(v.items())) if isinstance(v, Mapping) else v
            for k, v in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)) if k != "sources")))

    def _checked_tile(self, tile: Any) -> tuple[int, int, int, float]:
        """One ``[rows, cols, sms_per_tile]`` or ``[rows, cols, sms_per_tile, rate]`` entry, normalized."""
        if isinstance(tile, (str, bytes)) or len(tile) not in (3, 4):
            raise ValueError(f"GPU {self.name!r}: gemm_tiles entries are [rows, cols, sms_per_tile] or "
                             f"[rows, cols, sms_per_tile, rate], got {tile!r}")
        rows, cols, spt = (int(x) for x in tile[:3])
        rate = float(tile[3]) if len(tile) == 4 else 1.0
        if min(rows, cols, spt) < 1 or not 0 < rate <= 1:
            raise ValueError(f"GPU {self.name!r}: gemm_tiles entry {list(tile)}: rows, cols and sms_per_tile must be "
                             ">= 1 and rate in (0, 1] (fraction of the per-SM tensor-core peak)")
        return rows, cols, spt, rate

    def _checked_precisions(self) -> dict[str, tuple[str, ...]]:
        """``precisions`` validated and normalized: every tensor class, formats in PRECISIONS order."""
        given = dict(self.precisions)
        if not given:  # no table given: every format the tensor cores have a rate for
            rated = tuple(p for p in PRECISIONS if p in self.peak_flops_per_s)
            return {f: rated for f in PRECISION_FIELDS}
        bad = sorted(set(given) - set(PRECISION_FIELDS))
        missing = [f for f in PRECISION_FIELDS if f not in given]
        if bad or missing:
            raise ValueError(f"GPU {self.name!r}: precisions needs exactly the keys {list(PRECISION_FIELDS)}; "
                             f"unknown {bad}, missing {missing}")
        out: dict[str, tuple[str, ...]] = {}
        for f in PRECISION_FIELDS:
            v = given[f]
            if isinstance(v, str) or not all(isinstance(p, str) for p in v) or not v:
                raise ValueError(f"GPU {self.name!r}: precisions.{f} must be a non-empty list of {list(PRECISIONS)}, "
                                 f"got {v!r}")
            unknown = sorted(set(v) - set(PRECISIONS))
            if unknown:
                raise ValueError(f"GPU {self.name!r}: precisions.{f} has unknown format(s) {unknown}; "
                                 f"use {list(PRECISIONS)}")
            unrated = [p for p in v if f != "kv_cache" and p not in self.peak_flops_per_s]
            if unrated:
                raise ValueError(f"GPU {self.name!r}: precisions.{f} lists {unrated} but peak_flops_per_s has no rate "
                                 f"for it; add the rate or drop it from precisions.{f}")
            out[f] = tuple(p for p in PRECISIONS if p in v)
        return out

    def __hash__(self) -> int:  # Mapping fields are not hashable by default; computed once
        return self._hash  # type: ignore[attr-defined]

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s at ``precision``; ValueError if the GPU lacks it."""
        try:
            return self.peak_flops_per_s[precision]
        except KeyError:
            raise ValueError(
                f"GPU {self.name!r} has no {precision} tensor-core rate; it supports {sorted(self.peak_flops_per_s)}"
            ) from None

    def gemm_efficiency_at(self, precision: str) -> float:
        """Fraction of ``precision``'s dense peak that large GEMMs reach: its ``gemm_efficiency_by_precision``
        entry, else ``gemm_efficiency``."""
        return self.gemm_efficiency_by_precision.get(precision, self.gemm_efficiency)

    def decode_attention_law(self, kv_cache: str) -> tuple[float, float, float, float] | None:
        """``(fraction, cta_s, ramp_s, ramp_bytes)`` of the decode attention kernel over a ``kv_cache``-format cache:
        its ``decode_attention`` entry, else that of the narrowest wider format with one (a format without published
        timings, NVFP4, runs the same kernel family over fewer bytes, so it is never charged a slower kernel than a
        wider format), else None (the flat stream at ``memory_efficiency``)."""
        return _law_for(self.decode_attention, kv_cache)

    def decode_mla_law(self, kv_cache: str) -> tuple[float, float, float, float] | None:
        """``(compute_fraction, fraction, io_fraction, cta_s)`` of the absorbed MLA decode kernel over a ``kv_cache``-format
        latent cache: its ``decode_mla`` entry, else that of the narrowest wider format with one, else None (an MLA
        model then decodes under :meth:`decode_attention_law`)."""
        return _law_for(self.decode_mla, kv_cache)

    def replace(self, **changes: Any) -> "GPU":
        """A copy with some numbers changed (e.g. a calibrated efficiency)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, mappings as plain dicts (``dataclasses.asdict`` cannot deep-copy the
        read-only mapping proxies the spec tables are kept in)."""
        def plain(v: Any) -> Any:
            if isinstance(v, Mapping):
                return {k: plain(x) for k, x in v.items()}
            return [plain(x) for x in v] if isinstance(v, tuple) else v

        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _law_for(table: Mapping[str, Any], kv_cache: str) -> Any:
    """``table``'s entry for a KV-cache format, else that of the narrowest wider format with one (a format without
    published timings, NVFP4, runs the same kernel family over fewer bytes, so it is never charged a slower kernel
    than a wider format), else None."""
    law = table.get(kv_cache)
    if law is not None or kv_cache not in PRECISIONS:
        return law
    wider = PRECISIONS[:PRECISIONS.index(kv_cache)]  # widest first
    return next((table[p] for p in reversed(wider) if p in table), None)


_FIELDS = {f.name: f for f in dataclasses.fields(GPU)}
_META = {"name", "base", "aliases", "description"}


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # pyyaml: pure Python, imported only when a file is read

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read GPU file {str(path)!r}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"GPU file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping) or "name" not in data:
        raise ValueError(f"GPU file {str(path)!r} must be a mapping with at least a 'name:' key")
    return dict(data)


def _value(entry: Any, key: str, path: Path) -> tuple[Any, str]:
    if isinstance(entry, Mapping):
        if "value" not in entry:
            raise ValueError(f"GPU file {str(path)!r}: {key} is a mapping without 'value:'")
        return entry["value"], str(entry.get("source", f"user file {path}"))
    return entry, f"user file {path}"


def _merge(raw: Mapping[str, Any], path: Path, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """Turn a file's mapping into GPU kwargs, on top of ``base`` kwargs if given."""
    kw: dict[str, Any] = {k: v for k, v in (base or {}).items()}
    sources = dict(kw.get("sources", {}))
    peaks = dict(kw.get("peak_flops_per_s", {}))
    by_precision = dict(kw.get("gemm_efficiency_by_precision", {}))
    prefill = dict(kw.get("prefill_attention", {}))
    prefill_mla = dict(kw.get("prefill_mla", {}))
    decode = dict(kw.get("decode_attention", {}))
    mla = dict(kw.get("decode_mla", {}))
    precisions = dict(kw.get("precisions", {}))
    unknown = sorted(set(raw) - set(_FIELDS) - _META)
    if unknown:
        raise ValueError(f"GPU file {str(path)!r}: unknown key(s) {unknown}; known: {sorted(set(_FIELDS) - {'sources'})}")
    for key, entry in raw.items():
        if key in _META:
            continue
        if key == "peak_flops_per_s":
            if not isinstance(entry, Mapping):
                raise ValueError(f"GPU file {str(path)!r}: peak_flops_per_s must map precision -> value")
            for prec, sub in entry.items():
                v, src = _value(sub, f"peak_flops_per_s.{prec}", path)
                if v is None:  # explicit removal: the GPU lacks this precision
                    peaks.pop(prec, None)
                    continue
                peaks[prec] = float(v)
                sources[f"peak_flops_per_s.{prec}"] = src
            continue
        if key in ("gemm_efficiency_by_precision", "prefill_attention", "prefill_mla", "decode_attention",
                   "decode_mla"):
            table = {"gemm_efficiency_by_precision": by_precision, "prefill_attention": prefill,
                     "prefill_mla": prefill_mla, "decode_attention": decode, "decode_mla": mla}[key]
            if not isinstance(entry, Mapping):
                raise ValueError(f"GPU file {str(path)!r}: {key} must map precision -> value")
            for prec, sub in entry.items():
                v, src = _value(sub, f"{key}.{prec}", path)
                if v is None:  # explicit removal: the precision falls back to the flat efficiency
                    table.pop(prec, None)
                    continue
                table[prec] = v
                sources[f"{key}.{prec}"] = src
            continue
        if key == "precisions":
            if not isinstance(entry, Mapping):
                raise ValueError(f"GPU file {str(path)!r}: precisions must map weights/activations/kv_cache -> formats")
            for cls, sub in entry.items():
                v, src = _value(sub, f"precisions.{cls}", path)
                precisions[cls] = tuple(v) if isinstance(v, (list, tuple)) else v
                sources[f"precisions.{cls}"] = src
            continue
        v, src = _value(entry, key, path)
        kw[key] = v
        sources[key] = src
    kw["name"] = str(raw["name"]).lower()
    kw["aliases"] = tuple(str(a).lower() for a in raw.get("aliases", ())) if "aliases" in raw else ()
    kw["description"] = str(raw.get("description", kw.get("description", "")))
    kw["peak_flops_per_s"] = peaks
    kw["gemm_efficiency_by_precision"] = by_precision
    kw["prefill_attention"] = prefill
    kw["prefill_mla"] = prefill_mla
    kw["decode_attention"] = decode
    kw["decode_mla"] = mla
    kw["precisions"] = precisions
    kw["sources"] = sources
    return kw


def _build(kw: Mapping[str, Any], path: Path) -> GPU:
    missing = sorted(n for n, f in _FIELDS.items()
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and n not in kw)
    if missing:
        raise ValueError(f"GPU file {str(path)!r} is missing {missing}; give them or set 'base:' to a known GPU")
    kw = dict(kw)
    try:  # YAML 1.1 reads "3.35e12" as a string: coerce by the field's type
        for key, value in kw.items():
            kind = _FIELDS[key].type
            if kind == "float":
                kw[key] = float(value)
            elif kind == "int":
                kw[key] = int(value)
        kw["peak_flops_per_s"] = {p: float(v) for p, v in kw["peak_flops_per_s"].items()}
        kw["gemm_efficiency_by_precision"] = {p: float(v) for p, v in kw.get("gemm_efficiency_by_precision", {}).items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"GPU file {str(path)!r}: a number does not parse ({exc})") from None
    try:
        return GPU(**kw)
    except TypeError as exc:
        raise ValueError(f"GPU file {str(path)!r}: {exc}") from None


class _Catalog:
    """Built-in files plus the user's directories, read once per distinct env value."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._kwargs: dict[str, dict[str, Any]] = {}
        self._gpus: dict[str, GPU] = {}
        self._alias: dict[str, str] = {}

    def _files(self) -> list[Path]:
        files = sorted(_DATA_DIR.glob("*.yaml"))
        for d in filter(None, os.environ.get(HARDWARE_PATH_ENV, "").split(os.pathsep)):
            p = Path(d)
            if not p.is_dir():
                raise ValueError(f"{HARDWARE_PATH_ENV} names {d!r}, which is not a directory")
            files += sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
        return files

    def refresh(self) -> None:
        key = os.environ.get(HARDWARE_PATH_ENV, "")
        if key == self._key and self._gpus:
            return
        raws = [(path, _read_yaml(path)) for path in self._files()]
        self._kwargs, self._gpus, self._alias = {}, {}, {}
        pending = list(raws)
        while pending:  # resolve 'base:' chains in dependency order
            progressed = False
            for item in list(pending):
                path, raw = item
                name = str(raw["name"]).lower()
                base = raw.get("base")
                if base is None and name in self._kwargs:
                    base = name  # same name, no base: override the earlier definition
                if base is not None:
                    base = self._alias.get(str(base).lower(), str(base).lower())
                    if base not in self._kwargs:
                        continue
                kw = _merge(raw, path, self._kwargs[base] if base else None)
                if base is not None and "aliases" not in raw and base == name:
                    kw["aliases"] = self._kwargs[base]["aliases"]
                self._kwargs[name] = kw
                self._gpus[name] = _build(kw, path)
                for a in (name, *kw["aliases"]):
                    self._alias[a] = name
                pending.remove(item)
                progressed = True
            if not progressed:
                path, raw = pending[0]
                raise ValueError(f"GPU file {str(path)!r}: base {raw.get('base')!r} is not a known GPU; known: {sorted(self._kwargs)}")
        self._key = key

    def names(self) -> list[str]:
        self.refresh()
        return list(self._gpus)

    def get(self, name: str) -> GPU:
        self.refresh()
        key = self._alias.get(name.strip().lower())
        if key is None:
            raise ValueError(f"unknown GPU {name!r}; known: {', '.join(list_gpus())} "
                             f"(add one with a YAML file in ${HARDWARE_PATH_ENV} or load_gpu(path))")
        return self._gpus[key]

    def base_kwargs(self, name: str) -> dict[str, Any] | None:
        self.refresh()
        key = self._alias.get(name.lower())
        return self._kwargs.get(key) if key else None


_CATALOG = _Catalog()
_ORDER = ["h100", "h200", "b200", "gb200", "b300", "gb300"]


def list_gpus() -> list[str]:
    """Names of the known GPUs: the built-in six, then the user's files."""
    names = _CATALOG.names()
    return [n for n in _ORDER if n in names] + sorted(n for n in names if n not in _ORDER)


def get_gpu(name: "str | GPU") -> GPU:
    """The GPU called ``name`` (case-insensitive; aliases such as ``"GB200-NVL72"`` work).

    A :class:`GPU` passes through unchanged. Unknown names raise ValueError listing the known ones.
    """
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise ValueError(f"GPU must be a name or a GPU, got {type(name).__name__}")
    return _CATALOG.get(name)


def load_gpu(path: "str | os.PathLike[str]") -> GPU:
    """Read one GPU YAML file (format in this module's docstring).

    ``base: NAME`` starts from a catalog GPU, so a file may override a single number; a
    file named like a catalog GPU (``name: b200``) without ``base`` overrides that GPU.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"GPU file {str(path)!r} does not exist")
    raw = _read_yaml(path)
    base = raw.get("base")
    if base is None and _CATALOG.base_kwargs(str(raw["name"])) is not None:
        base = raw["name"]  # same name as a catalog GPU: override its numbers
    base_kw = None
    if base is not None:
        base_kw = _CATALOG.base_kwargs(str(base))
        if base_kw is None:
            raise ValueError(f"GPU file {str(path)!r}: base {base!r} is not a known GPU; known: {', '.join(list_gpus())}")
    return _build(_merge(raw, path, base_kw), path)
