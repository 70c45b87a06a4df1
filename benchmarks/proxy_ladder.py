"""Width ladder for the default space: does the proxy's ranking hold at 2x and 4x its width?

Issue 9 item 5, for spaces whose full-size candidates are too big to train on a CPU
(``space=dense_1b``: 0.5-3B parameters). Eight candidates drawn at random (seed 0) from the default space's
shapes inside its 0.5-3B band, each trained as the default proxy trains it (``proxy=cpu``: keep_layout, head_dim and FFN x 1/16,
layers x 1/8, μP, NVFP4, 150 steps of 8 x 128 bytes, seed 0) and at 2x and 4x that width (head_dim
and FFN x 1/8 and x 1/4, the same depth). The ranking at width w must hold at 2w and 4w: reported
as Spearman and Kendall between the rungs and pairs ordered alike. Rerun it on a GPU with larger
widths when one is available.

Runs are cached in benchmarks/results/proxy_ladder.jsonl (resumable). About 30 minutes on one core:
    python benchmarks/proxy_ladder.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _training import train_lm  # noqa: E402
from proxy_fidelity import kendall, pairs_right, spearman  # noqa: E402

from co_design.arch import Architecture  # noqa: E402
from co_design.model import MuP  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CACHE = RESULTS / "proxy_ladder.jsonl"
N_CANDIDATES = 8  # drawn at random (seed 0) from the default space's in-band shapes, not picked by hand
FACTORS = (1, 2, 4)


def settings() -> tuple[Any, list[tuple[str, Architecture]], MuP]:
    """(config, [(label, full-size candidate)], μP) of the default study."""
    import random

    from search.compose import compose_config
    from search.config import to_search_config
    from search.objective import param_budget
    from search.space import enumerate_candidates

    cfg = to_search_config(compose_config("tracking=off"))
    in_band = [c.arch for _, _, c in enumerate_candidates(cfg.space, cfg.deployment) if not param_budget(c.arch, cfg.space)[1]]
    picked = random.Random(0).sample(in_band, N_CANDIDATES)
    return cfg, [(chr(ord("A") + i), a) for i, a in enumerate(picked)], MuP(cfg.proxy.mup.base_hidden, cfg.proxy.mup.base_head_dim)


def main() -> None:
    from search.proxy import reduce_architecture

    cfg, candidates, mup = settings()
    done = {}
    if CACHE.exists():
        for line in CACHE.read_text().splitlines():
            try:
                row = json.loads(line)
                done[row["key"]] = row
            except json.JSONDecodeError:
                continue
    for label, full in candidates:
        for f in FACTORS:
            key = f"{label}|{f}"
            if key in done:
                continue
            red = dataclasses.replace(cfg.proxy.reduction, width=cfg.proxy.reduction.width * f)
            arch = reduce_architecture(full, red, 256)
            run = train_lm(arch, steps=150, lr=cfg.proxy.lr, mup=mup, quant="nvfp4")
            row = dict(key=key, label=label, factor=f, arch=arch.to_dict(), loss=run.loss, seconds=run.seconds)
            RESULTS.mkdir(exist_ok=True)
            with open(CACHE, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            done[key] = row
            print(f"{label} x{f} hidden {arch.hidden} layers {arch.layers}: {run.loss:.4f} ({run.seconds:.0f} s)", flush=True)
    lines = ["# Width ladder of the default proxy (space=dense_1b, proxy=cpu)", "",
             "Produced by `python benchmarks/proxy_ladder.py` (runs in proxy_ladder.jsonl). Validation loss "
             "(nats/token) after 150 steps x 8 x 128 tokens, μP, NVFP4, seed 0; w = the default proxy's width.", "",
             "| cand | full-size shape | w | 2w | 4w |", "|---|---|---|---|---|"]
    from search.space import shape_label

    table = {lab: [done[f"{lab}|{f}"]["loss"] for f in FACTORS] for lab, _ in candidates}
    for label, full in candidates:
        lines.append(f"| {label} | {shape_label(full)} ({full.param_counts().total / 1e9:.2f}B) | "
                     + " | ".join(f"{v:.4f}" for v in table[label]) + " |")
    lines += ["", "| rungs | Spearman | Kendall | pairs ordered alike |", "|---|---|---|---|"]
    labels = list(table)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        a = [table[lab][i] for lab in labels]
        b = [table[lab][j] for lab in labels]
        r, n = pairs_right(a, b)
        lines.append(f"| {FACTORS[i]}w vs {FACTORS[j]}w | {spearman(a, b):+.3f} | {kendall(a, b):+.3f} | {r}/{n} |")
    (RESULTS / "proxy_ladder.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
