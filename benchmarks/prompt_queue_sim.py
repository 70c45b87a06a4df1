"""How far the Poisson prompt queue's closed form is from an iteration-level scheduler.

``Deployment(arrivals="poisson")`` adds to a prompt's own TTFT the wait of an M/D/1 queue of fluid prefill
work (:func:`co_design.perf.serving._prompt_load`): every prompt needs ``ISL / room`` budget-full
iterations, served first come first served. A runtime does it in whole iterations: each carries the decode
tokens of the requests in flight and fills the rest of ``max_num_tokens`` with waiting prompt tokens in
arrival order (chunked); a request that arrives during an iteration joins at its end, and its first token
comes at the end of the iteration holding its last chunk. This script simulates that scheduler with the
model's own step times (``co_design.perf.ops.step_time``, at graph speed as the model's steady state runs
its iterations) under Poisson arrivals at the closed form's rate, and compares the *wait*: the simulated
TTFT less the prompt's own iterations when it arrives at an iteration's end to an empty queue, against the
closed form's M/D/1 wait (mean and p99). Both are the model: this measures the queue's abstraction, not
the model against hardware (that is ``validate_perf.py --mlperf-latency``).

Cases: the MLPerf Server/Interactive rows at their published load (``validate_perf.at_load``), on each
mapping that reaches it, and one synthetic short-prompt case. The decode batch is held at the steady
state's (the requests in flight), so the simulation isolates the prompt queue.

Usage: python benchmarks/prompt_queue_sim.py [--requests 20000] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_perf as vp  # noqa: E402  (its row readers and at_load)

from co_design.arch import Architecture  # noqa: E402
from co_design.hardware import get_gpu  # noqa: E402
from co_design.perf import Deployment, Prediction, Runtime, predict  # noqa: E402
from co_design.perf.ops import shards, step_time  # noqa: E402


def simulate(arch: Architecture, gpu_name: str, p: Prediction, requests: int, seed: int = 1) -> list[float]:
    """Waits (seconds) of ``requests`` Poisson arrivals at the rate ``p`` completes them, through an
    iteration-level first-come-first-served chunked-prefill scheduler with ``p``'s batch decoding: each
    TTFT less the prompt's own iterations from an iteration's end with nothing ahead of it."""
    d, gpu = p.deployment, get_gpu(gpu_name)
    rt = d.runtime
    b = p.batch / d.replicas
    a_dp = shards(arch, d).a_dp
    room = rt.max_num_tokens * a_dp - b / d.pp
    lam = b / (d.osl * p.tpot_s)  # prompts per second, the closed form's rate
    host = rt.iteration_overhead_s + rt.request_overhead_s * b / a_dp
    cache: dict[int, float] = {}

    def iteration_s(tokens: int) -> float:
        if tokens not in cache:
            cache[tokens] = d.pp * sum(step_time(arch, gpu, d, decode=b / d.pp, context=d.isl + d.osl / 2,
                                                 prefill_tokens=float(tokens), prefill_len=d.isl).values()) + host
        return cache[tokens]

    chunks, rest = divmod(d.isl, room)
    alone = chunks * iteration_s(round(room)) + (iteration_s(round(rest)) if rest else 0.0)
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(lam)
        arrivals.append(t)
    queue: list[list[float]] = []  # [arrival, prompt tokens left]
    waits: list[float] = []
    clock, nxt = 0.0, 0
    while len(waits) < requests:
        while nxt < requests and arrivals[nxt] <= clock:
            queue.append([arrivals[nxt], float(d.isl)])
            nxt += 1
        if not queue:  # decode-only iterations until the next arrival (it joins at an iteration's end)
            while clock < arrivals[nxt]:
                clock += iteration_s(0)
            continue
        fill, finished = 0.0, 0
        for q in queue:
            take = min(q[1], room - fill)
            if take <= 0:
                break
            q[1] -= take
            fill += take
            finished += q[1] <= 0
        clock += iteration_s(round(fill))
        waits += [clock - q[0] - alone for q in queue[:finished]]
        del queue[:finished]
    return waits


def cases() -> list[tuple[str, Architecture, str, Prediction]]:
    out = []
    for row in vp.mlperf_latency_rows(json.loads(vp.DATA.read_text())):
        m = row["metrics"]
        arch = vp.arch_of(row)
        gpu = row["hardware"].lower()
        for d in vp.deployments_of(row, arch, Runtime())[0]:
            p = vp.at_load(arch, get_gpu(gpu), d, m["tokens_per_s_per_gpu_derived"])
            if p is not None:
                out.append((f"{row['id']} {row['model']} {row['hardware']} {d.label}", arch, gpu, p))
    small = Architecture(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, name="8B-shaped")
    d = Deployment(weights="fp8", activations="fp8", isl=1024, osl=256, arrivals="poisson", concurrency=96)
    out.append(("synthetic 8B-shaped H100 TP1, 1024/256, 96 in flight", small, "h100", predict(small, "h100", d)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    items = []
    for name, arch, gpu, p in cases():
        steady = predict(arch, gpu, p.deployment.replace(arrivals="steady"))
        waits = sorted(simulate(arch, gpu, p, args.requests))
        items.append({"case": name, "requests_in_flight_per_replica": p.batch / p.deployment.replicas,
                      "closed_form_wait_ms": {"mean": (p.ttft_s - steady.ttft_s) * 1e3,
                                              "p99": (p.ttft_p99_s - steady.ttft_s) * 1e3},
                      "simulated_wait_ms": {"mean": statistics.fmean(waits) * 1e3,
                                            "p99": waits[int(0.99 * len(waits))] * 1e3},
                      "own_ttft_ms": steady.ttft_s * 1e3, "tpot_ms": p.tpot_s * 1e3})
    L = ["# The Poisson prompt queue: closed form against an iteration-level scheduler", "",
         f"Command: `python benchmarks/prompt_queue_sim.py --requests {args.requests}` (seconds). The closed form's "
         "wait is what `predict` adds to a prompt's own TTFT with `arrivals=\"poisson\"` (an M/D/1 queue of fluid "
         "prefill work); the simulated wait runs the same load and step times through whole iterations that fill "
         "`max_num_tokens` with waiting prompt tokens in arrival order (seed 1), less the prompt's own iterations. "
         "Both are the model: this measures the queue's abstraction only.", "",
         "| case | in flight | TPOT ms | own TTFT ms | wait mean ms (closed / simulated) | wait p99 ms (closed / simulated) |",
         "|---|---:|---:|---:|---:|---:|"]
    for it in items:
        c, s = it["closed_form_wait_ms"], it["simulated_wait_ms"]
        L.append(f"| {it['case']} | {it['requests_in_flight_per_replica']:.0f} | {it['tpot_ms']:.1f} | "
                 f"{it['own_ttft_ms']:,.0f} | {c['mean']:,.1f} / {s['mean']:,.1f} | {c['p99']:,.1f} / {s['p99']:,.1f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompt_queue_sim.md").write_text("\n".join(L) + "\n")
    (out / "prompt_queue_sim.json").write_text(json.dumps(items, indent=1) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
