"""How far the Poisson prompt queue's closed form is from an iteration-level scheduler.

``Deployment(arrivals="poisson")`` adds to a prompt's own TTFT the wait of an iteration-level prompt queue
(:func:`co_design.perf.queueing.iteration_queue_wait`, a closed form): a runtime works in whole iterations;
each carries the decode tokens of the requests in flight and fills the rest of ``max_num_tokens`` with
waiting prompt tokens in arrival order (chunked); a request that arrives during an iteration joins at its
end, and its first token comes at the end of the iteration holding its last chunk. This script simulates
that scheduler with the model's own step times (``co_design.perf.ops.step_time``, at graph speed as the
model's steady state runs its iterations) under Poisson arrivals at the closed form's rate, and compares the
*wait*: the simulated TTFT less the prompt's own iterations when it arrives at an iteration's end to an empty
queue, against the closed form's wait (mean and p99), and against the fluid M/D/1 queue of prefill work that
``predict`` used before (:func:`co_design.perf.queueing.md1_mean_wait`). Both are the model: this measures
the queue's abstraction, not the model against hardware (that is ``validate_perf.py --mlperf-latency``).

Cases: the MLPerf Server/Interactive rows at their published load (``validate_perf.at_load``), on each
mapping that reaches it, and a grid of an 8B-shaped model on one H100 (prompts of 256-32768 tokens, 16-192
requests in flight where its KV cache holds them: prompts from 0.03x to 4x the iteration's room), and a
70B-shaped one on 2 H100 per stage with 2 and 4 pipeline stages. The decode batch is held at the steady
state's (the requests in flight), so the simulation isolates the prompt queue. A last set runs
DeepSeek-V3- and Qwen3-235B-shaped MoEs under attention-DP (DEP4 and DEP8 on B200 and H200), where each
rank takes its own prompts (``simulate_queue(ranks=...)``), the requests routed as TensorRT-LLM's router routes
them (``router="balanced"``; random ranks beside it), at the load at which the simulation is self-consistent.

Usage: python benchmarks/prompt_queue_sim.py [--requests 20000] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_perf as vp  # noqa: E402  (its row readers and at_load)

from co_design.arch import MLA, Architecture  # noqa: E402
from co_design.hardware import get_gpu  # noqa: E402
from co_design.perf import Deployment, Prediction, Runtime, predict  # noqa: E402
from co_design.perf.ops import shards, step_time  # noqa: E402
from co_design.perf.queueing import iteration_queue_wait, md1_mean_wait, md1_wait_quantile  # noqa: E402


def simulate_queue(rate: float, isl: int, room: float, iteration_s: Callable[[int, int], float], requests: int,
                   seed: int = 1, ranks: int = 1, stats: dict[str, float] | None = None, router: str = "random",
                   osl: int = 0) -> list[float]:
    """Waits (seconds) of ``requests`` Poisson arrivals (``rate`` per second) of ``isl``-token prompts through an
    iteration-level first-come-first-served chunked-prefill scheduler whose iteration with ``x`` prompt tokens,
    ``y`` of them on the busiest rank, takes ``iteration_s(x, y)`` seconds: each TTFT less the prompt's own
    iterations from an iteration's end with nothing ahead of it. ``ranks`` attention-DP ranks: each arrival goes
    to a rank (``router`` "random", the default: drawn at random), and each rank fills its own ``room`` per
    iteration from its own queue; the
    iteration, shared by all ranks, carries every rank's tokens. ``router`` "balanced" routes as TensorRT-LLM's
    default attention-DP router does (``DefaultADPRouter``: each request, when the scheduler fetches it at an
    iteration's end, goes to the rank with the fewest active requests, ties to the lowest rank; with one prompt
    length its token count orders the ranks as their request count), a request staying active until ``osl``
    iterations after its first token. ``stats``, when given, receives the mean iteration length
    (``mean_iteration_s``) and, over the iterations that carry prompt tokens, the mean of their busiest rank's
    (``mean_busiest_tokens``)."""
    cache: dict[tuple[int, int], float] = {}

    def length(tokens: float, busiest: float) -> float:
        key = (round(tokens), round(busiest))
        if key not in cache:
            cache[key] = iteration_s(*key)
        return cache[key]

    chunks, rest = divmod(isl, room)
    alone = chunks * length(room, room) + (length(rest, rest) if rest else 0.0)
    rng = random.Random(seed)
    if router not in ("random", "balanced") or router == "balanced" and osl < 1:
        raise ValueError(f"router={router!r} must be 'random' or 'balanced' (with osl={osl} >= 1)")
    arrivals, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        arrivals.append((t, rng.randrange(ranks) if ranks > 1 else 0))
    active = [0] * ranks  # balanced: requests on each rank, from routing until osl iterations after the first token
    leaving: dict[int, list[int]] = {}  # iteration -> ranks whose requests finish then
    queues: list[list[list[float]]] = [[] for _ in range(ranks)]  # per rank: [arrival, tokens left, rank]
    waits: list[float] = []
    clock, nxt, iterations, carrying, busiest_sum = 0.0, 0, 0, 0, 0.0
    while len(waits) < requests:
        for rank in leaving.pop(iterations, ()):
            active[rank] -= 1
        while nxt < requests and arrivals[nxt][0] <= clock:
            rank = arrivals[nxt][1]
            if router == "balanced":
                rank = min(range(ranks), key=lambda r: (active[r], r))
                active[rank] += 1
            queues[rank].append([arrivals[nxt][0], float(isl), rank])
            nxt += 1
        if not any(queues):  # decode-only iterations until the next arrival (it joins at an iteration's end)
            while clock < arrivals[nxt][0]:
                clock += length(0, 0)
                iterations += 1
                for rank in leaving.pop(iterations, ()):
                    active[rank] -= 1
            continue
        fills, done = [], []
        for queue in queues:
            fill, finished = 0.0, 0
            for q in queue:
                take = min(q[1], room - fill)
                if take <= 0:
                    break
                q[1] -= take
                fill += take
                finished += q[1] <= 0
            fills.append(fill)
            done.append(finished)
        clock += length(sum(fills), max(fills))
        iterations += 1
        if max(fills) > 0:
            carrying, busiest_sum = carrying + 1, busiest_sum + max(fills)
        for queue, finished in zip(queues, done):
            waits += [clock - q[0] - alone for q in queue[:finished]]
            if router == "balanced":
                for q in queue[:finished]:
                    leaving.setdefault(iterations + osl, []).append(q[2])
            del queue[:finished]
    if stats is not None:
        stats["mean_iteration_s"] = clock / iterations
        stats["mean_busiest_tokens"] = busiest_sum / carrying if carrying else 0.0
    return waits


def queue_of(arch: Architecture, gpu_name: str, p: Prediction) -> tuple[float, float, int, Callable[[int, int], float]]:
    """``(rate, room, ranks, iteration_s)`` of ``p``'s replica as the closed form sees it: prompts per second, prompt
    tokens per round of iterations on one attention-DP rank, the ranks, and a round's seconds with ``x`` prompt
    tokens, ``y`` of them on the busiest rank."""
    d, gpu = p.deployment, get_gpu(gpu_name)
    rt = d.runtime
    b = p.batch / d.replicas
    a_dp = shards(arch, d).a_dp
    host = rt.iteration_overhead_s + rt.request_overhead_s * b / a_dp

    def iteration_s(tokens: int, busiest: int) -> float:
        return d.pp * sum(step_time(arch, gpu, d, decode=b / d.pp, context=d.isl + d.osl / 2,
                                    prefill_tokens=tokens / d.pp, prefill_len=d.isl,
                                    prompt_ranks=tokens / busiest if busiest else None).values()) + host

    return b / (d.osl * p.tpot_s), d.pp * (rt.max_num_tokens - b / d.pp / a_dp), a_dp, iteration_s


def simulate(arch: Architecture, gpu_name: str, p: Prediction, requests: int, seed: int = 1,
             stats: dict[str, float] | None = None) -> list[float]:
    """:func:`simulate_queue` of ``p``'s replica (:func:`queue_of`) at the closed form's rate."""
    rate, room, ranks, iteration_s = queue_of(arch, gpu_name, p)
    return simulate_queue(rate, p.deployment.isl, room, iteration_s, requests, seed, ranks, stats)


GRID_ISL = (256, 1024, 4096, 8192, 16384, 32768)
GRID_CONCURRENCY = (16, 64, 192)
PIPELINE_CASES = ((2, 1024, 64), (2, 8192, 32), (4, 2048, 128))  # (pp, ISL, requests in flight)


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
    for isl in GRID_ISL:
        for concurrency in GRID_CONCURRENCY:
            d = Deployment(weights="fp8", activations="fp8", isl=isl, osl=256, arrivals="poisson",
                           concurrency=concurrency)
            p = predict(small, "h100", d)
            # where the KV cache holds fewer, the rest also wait for a slot (predict's Little's-law wait), a
            # queue the simulation leaves out
            if math.isfinite(p.ttft_s) and p.batch == concurrency:
                out.append((f"8B-shaped H100 TP1, {isl}/256, {concurrency} in flight", small, "h100", p))
    big = Architecture(hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=128256, name="70B-shaped")
    for pp, isl, concurrency in PIPELINE_CASES:  # rounds of pp micro-batch iterations
        d = Deployment(weights="fp8", activations="fp8", tp=2, pp=pp, isl=isl, osl=256, arrivals="poisson",
                       concurrency=concurrency)
        out.append((f"70B-shaped H100 TP2 PP{pp}, {isl}/256, {concurrency} in flight", big, "h100",
                    predict(big, "h100", d)))
    return out


# (model, GPU, attention-DP ranks = EP ranks, weights, ISL, requests in flight); OSL 1024
ADP_CASES = (("DeepSeek-V3", "b200", 8, "nvfp4", 256, 1024), ("DeepSeek-V3", "b200", 8, "nvfp4", 1024, 256),
             ("DeepSeek-V3", "b200", 8, "nvfp4", 1024, 1024), ("DeepSeek-V3", "b200", 8, "nvfp4", 1024, 2048),
             ("DeepSeek-V3", "b200", 8, "nvfp4", 4096, 512), ("DeepSeek-V3", "b200", 8, "nvfp4", 4096, 1024),
             ("DeepSeek-V3", "b200", 8, "nvfp4", 8192, 256), ("DeepSeek-V3", "b200", 8, "nvfp4", 8192, 1024),
             ("DeepSeek-V3", "b200", 8, "nvfp4", 16384, 256), ("DeepSeek-V3", "b200", 4, "nvfp4", 1024, 512),
             ("DeepSeek-V3", "b200", 4, "nvfp4", 8192, 256), ("Qwen3-235B-A22B", "h200", 8, "fp8", 1024, 1024),
             ("Qwen3-235B-A22B", "h200", 8, "fp8", 8192, 512))


def attention_dp_cases() -> list[tuple[str, Architecture, str, Prediction]]:
    """MoE models under attention-DP with expert parallelism over the same ranks (DEP), Poisson arrivals:
    ``ADP_CASES``, DeepSeek-V3's and Qwen3-235B-A22B's shapes (their Hugging Face config.json files)."""
    shapes = {
        "DeepSeek-V3": Architecture(
            hidden=7168, layers=61, heads=128, ffn=18432, vocab=129280, experts=256, experts_per_token=8,
            shared_experts=1, expert_ffn=2048, shared_expert_ffn=2048, dense_layers=3,
            mla=MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=1536),
            name="DeepSeek-V3-shaped"),
        "Qwen3-235B-A22B": Architecture(
            hidden=4096, layers=94, heads=64, kv_heads=4, head_dim=128, ffn=12288, vocab=151936, experts=128,
            experts_per_token=8, expert_ffn=1536, name="Qwen3-235B-A22B-shaped")}
    out = []
    for model, gpu, ranks, weights, isl, concurrency in ADP_CASES:
        arch = shapes[model]
        d = Deployment(tp=ranks, ep=ranks, attention_dp=True, weights=weights, activations=weights, kv_cache="fp8",
                       isl=isl, osl=1024, arrivals="poisson", concurrency=concurrency)
        p = predict(arch, gpu, d)
        if math.isfinite(p.ttft_s) and p.batch == concurrency:
            out.append((f"{arch.name} {gpu.upper()} {d.label}, {isl}/1024, {concurrency} in flight", arch, gpu, p))
    return out


def pooled_wait(arch: Architecture, gpu_name: str, p: Prediction) -> tuple[float, float]:
    """Mean and p99 wait (seconds) of the closed form as ``predict`` ran it under attention-DP before it kept a queue
    per rank: one queue over every rank's room at the replica's rate, iterations from decode-only to every rank
    full."""
    rate, room, ranks, iteration_s = queue_of(arch, gpu_name, p)
    full = iteration_s(round(room * ranks), round(room))
    return iteration_queue_wait(rate, p.deployment.isl, room * ranks, iteration_s(0, 0), full, 0.99)


def self_consistent(arch: Architecture, gpu_name: str, p: Prediction, requests: int, seed: int = 1,
                    steps: int = 14, router: str = "balanced") -> tuple[float, float, list[float]]:
    """``(rate, mean iteration seconds, waits)`` of the simulated scheduler at its own steady state: the Poisson
    rate at which the replica's requests in flight, each emitting one token per iteration, finish as fast as they
    arrive (``rate = b / (OSL x E[T])``, ``E[T]`` the simulated mean iteration), found by bisection."""
    _, room, ranks, iteration_s = queue_of(arch, gpu_name, p)
    d = p.deployment
    b = p.batch / d.replicas

    def run(rate: float) -> tuple[float, list[float]]:
        stats: dict[str, float] = {}
        waits = simulate_queue(rate, d.isl, room, iteration_s, requests, seed, ranks, stats, router, d.osl)
        return stats["mean_iteration_s"], waits

    lo, hi = 0.0, b / (d.osl * iteration_s(0, 0))  # at hi the iterations would have to be decode-only
    for _ in range(steps):
        mid = (lo + hi) / 2
        if mid * d.osl * run(mid)[0] > b:
            hi = mid
        else:
            lo = mid
    rate = (lo + hi) / 2
    return (rate, *run(rate))


def fluid_wait(arch: Architecture, gpu_name: str, p: Prediction) -> tuple[float, float]:
    """Mean and p99 wait (seconds) of the fluid M/D/1 queue ``predict`` used before: each prompt ``ISL / room``
    budget-full rounds of work, served in arrival order."""
    rate, room, ranks, iteration_s = queue_of(arch, gpu_name, p)
    room *= ranks
    service = p.deployment.isl / room * iteration_s(round(room), round(room / ranks))
    rho = rate * service
    return md1_mean_wait(rho, service), md1_wait_quantile(rho, service, 0.99)


LINEAR_ROOM = 8000
LINEAR_ITERATIONS = ((0.01, 0.1), (0.02, 0.5), (0.03, 1.0))  # (decode-only, budget-full) seconds
LINEAR_ISL = (256, 1024, 4096, 7000, 8000, 9200, 12000, 16000, 32000)
LINEAR_BUSY = (0.2, 0.5, 0.8)


def linear_grid(requests: int) -> list[dict[str, float]]:
    """The closed form against :func:`simulate_queue` on iterations linear in their prompt tokens, away from any
    model: every (decode-only, budget-full) pair of ``LINEAR_ITERATIONS``, prompt of ``LINEAR_ISL`` tokens beside
    a room of ``LINEAR_ROOM``, at the arrival rate that keeps budget-full iterations busy ``LINEAR_BUSY`` of the
    time."""
    out = []
    for idle, full in LINEAR_ITERATIONS:
        for isl in LINEAR_ISL:
            for busy in LINEAR_BUSY:
                rate = busy * LINEAR_ROOM / (isl * full)
                waits = sorted(simulate_queue(rate, isl, LINEAR_ROOM,
                                              lambda x, _, i=idle, f=full: i + (f - i) * x / LINEAR_ROOM, requests))
                mean, p99 = iteration_queue_wait(rate, isl, LINEAR_ROOM, idle, full)
                out.append({"idle_s": idle, "full_s": full, "isl": isl, "busy": busy,
                            "mean_ratio": mean / statistics.fmean(waits),
                            "p99_ratio": p99 / waits[int(0.99 * len(waits))]})
    return out


def _range(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    items = []
    for name, arch, gpu, p in cases():
        steady = predict(arch, gpu, p.deployment.replace(arrivals="steady"))
        waits = sorted(simulate(arch, gpu, p, args.requests))
        rate, room, ranks, iteration_s = queue_of(arch, gpu, p)
        room *= ranks
        fluid = fluid_wait(arch, gpu, p)
        items.append({"case": name, "requests_in_flight_per_replica": p.batch / p.deployment.replicas,
                      "prompt_over_room": p.deployment.isl / room,
                      "prompt_busy_share": rate * p.deployment.isl / room * iteration_s(round(room), round(room / ranks)),
                      "closed_form_wait_ms": {"mean": (p.ttft_s - steady.ttft_s) * 1e3,
                                              "p99": (p.ttft_p99_s - steady.ttft_s) * 1e3},
                      "fluid_md1_wait_ms": {"mean": fluid[0] * 1e3, "p99": fluid[1] * 1e3},
                      "simulated_wait_ms": {"mean": statistics.fmean(waits) * 1e3,
                                            "p99": waits[int(0.99 * len(waits))] * 1e3},
                      "own_ttft_ms": steady.ttft_s * 1e3, "tpot_ms": p.tpot_s * 1e3})
    ratio = {(form, stat): [it[form][stat] / it["simulated_wait_ms"][stat] for it in items]
             for form in ("closed_form_wait_ms", "fluid_md1_wait_ms") for stat in ("mean", "p99")}
    busy = [it["prompt_busy_share"] for it in items]
    L = ["# The Poisson prompt queue: closed form against an iteration-level scheduler", "",
         f"Command: `python benchmarks/prompt_queue_sim.py --requests {args.requests}` (seconds). The closed "
         "form's wait is what `predict` adds to a prompt's own TTFT with `arrivals=\"poisson\"` "
         "(`co_design.perf.queueing.iteration_queue_wait`: the iteration in progress, the prompts ahead, the later "
         "arrivals that share the last iteration); the fluid M/D/1 is the queue of prefill work it replaced; the "
         "simulated wait runs the same load and step times through whole iterations that fill `max_num_tokens` "
         "with waiting prompt tokens in arrival order (seed 1), less the prompt's own iterations. All three are "
         "the model: this measures the queue's abstraction only.", "",
         f"Closed form / simulated: mean {_range(ratio['closed_form_wait_ms', 'mean'])}, p99 "
         f"{_range(ratio['closed_form_wait_ms', 'p99'])} over {len(items)} cases (prompts keep the replica busy "
         f"{min(busy):.0%}-{max(busy):.0%} of the time); the fluid M/D/1: mean "
         f"{_range(ratio['fluid_md1_wait_ms', 'mean'])}, p99 {_range(ratio['fluid_md1_wait_ms', 'p99'])}.", "",
         "| case | in flight | prompt / room | busy | TPOT ms | own TTFT ms | wait mean ms (closed / M/D/1 / simulated) "
         "| wait p99 ms (closed / M/D/1 / simulated) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for it in items:
        c, f, s = it["closed_form_wait_ms"], it["fluid_md1_wait_ms"], it["simulated_wait_ms"]
        L.append(f"| {it['case']} | {it['requests_in_flight_per_replica']:.0f} | {it['prompt_over_room']:.2f} | "
                 f"{it['prompt_busy_share']:.0%} | {it['tpot_ms']:.1f} | {it['own_ttft_ms']:,.0f} | {c['mean']:,.1f} / {f['mean']:,.1f} / "
                 f"{s['mean']:,.1f} | {c['p99']:,.1f} / {f['p99']:,.1f} / {s['p99']:,.1f} |")
    grid = linear_grid(args.requests // 2)
    worst = sorted(grid, key=lambda g: -max(abs(math.log(g["mean_ratio"])), abs(math.log(g["p99_ratio"]))))[:5]
    L += ["", "## Iterations linear in their prompt tokens", "",
          f"Away from any model: iterations of {LINEAR_ROOM} prompt tokens' room taking "
          f"{', '.join(f'{i * 1e3:g} ms decode-only and {f * 1e3:g} ms budget-full' for i, f in LINEAR_ITERATIONS)}, "
          f"linear between; prompts of {', '.join(map(str, LINEAR_ISL))} tokens; arrival rates that keep budget-full "
          f"iterations busy {', '.join(f'{b:.0%}' for b in LINEAR_BUSY)} of the time ({args.requests // 2} arrivals "
          f"each). Closed form / simulated over the {len(grid)} cases: mean "
          f"{_range([g['mean_ratio'] for g in grid])}, p99 {_range([g['p99_ratio'] for g in grid])}. The five "
          "farthest:", "",
          "| decode-only ms | budget-full ms | prompt tokens | busy | mean ratio | p99 ratio |",
          "|---:|---:|---:|---:|---:|---:|"]
    L += [f"| {g['idle_s'] * 1e3:g} | {g['full_s'] * 1e3:g} | {g['isl']} | {g['busy']:.0%} | {g['mean_ratio']:.2f} | "
          f"{g['p99_ratio']:.2f} |" for g in worst]
    adp = []
    for name, arch, gpu, p in attention_dp_cases():
        even = predict(arch, gpu, p.deployment.replace(arrivals="steady"))  # prompts spread evenly over the ranks
        before = pooled_wait(arch, gpu, even)  # at the rate the even spread's TPOT gives
        rate, mean_iteration, waits = self_consistent(arch, gpu, p, args.requests)
        waits.sort()
        random_waits = sorted(self_consistent(arch, gpu, p, args.requests, router="random")[2])
        adp.append({"case": name, "tpot_ms": {"predicted": p.tpot_s * 1e3, "even_spread": even.tpot_s * 1e3,
                                              "simulated": mean_iteration * 1e3},
                    "rate_per_s": {"predicted": p.batch / (p.deployment.osl * p.tpot_s), "simulated": rate},
                    "closed_form_wait_ms": {"mean": (p.ttft_s - even.ttft_s) * 1e3,
                                            "p99": (p.ttft_p99_s - even.ttft_s) * 1e3},
                    "pooled_wait_ms": {"mean": before[0] * 1e3, "p99": before[1] * 1e3},
                    "simulated_wait_ms": {"mean": statistics.fmean(waits) * 1e3,
                                          "p99": waits[int(0.99 * len(waits))] * 1e3},
                    "simulated_random_ranks_wait_ms": {"mean": statistics.fmean(random_waits) * 1e3,
                                                       "p99": random_waits[int(0.99 * len(random_waits))] * 1e3}})
    adp_ratio = {(form, stat): [it[form][stat] / it["simulated_wait_ms"][stat] for it in adp]
                 for form in ("closed_form_wait_ms", "pooled_wait_ms", "simulated_random_ranks_wait_ms")
                 for stat in ("mean", "p99")}
    tpot_ratio = {form: [it["tpot_ms"][form] / it["tpot_ms"]["simulated"] for it in adp]
                  for form in ("predicted", "even_spread")}
    L += ["", "## Attention-DP: prompts on the ranks the router picks", "",
          "Under attention-DP a request's prompt runs on the rank that holds the request, each rank fills its own "
          "`max_num_tokens` from its own queue, and an iteration, shared by all ranks, lasts as long as its "
          "prompt tokens make it (the busiest rank's attention, every rank's tokens through the experts). The "
          "simulation routes each request as TensorRT-LLM's default attention-DP router does "
          "(`tensorrt_llm/_torch/pyexecutor/scheduler/adp_router.py`, `DefaultADPRouter`: when the scheduler "
          "fetches it at an iteration's end, to the rank with the fewest active requests, ties to the lowest "
          "rank; a request stays active until OSL iterations after its first token), at the rate at which its "
          "own mean iteration keeps the requests in flight finishing as fast as they arrive (`self_consistent`). "
          "`predict` (`arrivals=\"poisson\"`) places prompts the same way in closed form "
          "(`co_design.perf.queueing.prompt_counts`, `busy_ranks`): the steady state over whole counts of prompts "
          "(or busy ranks) per iteration, the busiest rank carrying `ceil(n / ranks)` of `n`, a queue per rank, "
          "and the prompt's own iterations beside the other ranks' prompts. "
          "Before, it spread every prompt evenly over the ranks (as `arrivals=\"steady\"` still does: the "
          "fixed-length benchmark runs keep the ranks in step) and pooled the ranks' room into one queue. "
          f"TPOT predicted / simulated: {_range(tpot_ratio['predicted'])} (spread evenly: "
          f"{_range(tpot_ratio['even_spread'])}). Wait, closed form / simulated: mean "
          f"{_range(adp_ratio['closed_form_wait_ms', 'mean'])}, p99 {_range(adp_ratio['closed_form_wait_ms', 'p99'])} "
          f"(pooled: mean {_range(adp_ratio['pooled_wait_ms', 'mean'])}, p99 "
          f"{_range(adp_ratio['pooled_wait_ms', 'p99'])}). Routed to random ranks instead, the simulated waits "
          f"are {_range(adp_ratio['simulated_random_ranks_wait_ms', 'mean'])} as long (mean) and "
          f"{_range(adp_ratio['simulated_random_ranks_wait_ms', 'p99'])} (p99). The wait counts from arrival to first "
          "token, less the prompt's own iterations with no other prompt beside it.", "",
          "| case | TPOT ms (predicted / spread evenly / simulated) | wait mean ms (closed / pooled / simulated) "
          "| wait p99 ms (closed / pooled / simulated) |", "|---|---:|---:|---:|"]
    for it in adp:
        t, c, u, s = it["tpot_ms"], it["closed_form_wait_ms"], it["pooled_wait_ms"], it["simulated_wait_ms"]
        L.append(f"| {it['case']} | {t['predicted']:,.1f} / {t['even_spread']:,.1f} / {t['simulated']:,.1f} | "
                 f"{c['mean']:,.1f} / {u['mean']:,.1f} / {s['mean']:,.1f} | "
                 f"{c['p99']:,.1f} / {u['p99']:,.1f} / {s['p99']:,.1f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompt_queue_sim.md").write_text("\n".join(L) + "\n")
    (out / "prompt_queue_sim.json").write_text(json.dumps({"model_cases": items, "linear_grid": grid, "attention_dp_cases": adp},
                                                          indent=1)
                                               + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
