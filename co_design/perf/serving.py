"""Serving predictions: one operating point, the max-throughput point, the Pareto front.

Steady state of in-flight batching (what an offline max-load benchmark
measures): a replica keeps ``B`` requests in flight. Each iteration every one of
them emits a token, and to keep the batch full ``B / OSL`` requests finish and as
many start, so ``P = B · ISL / OSL`` prompt tokens enter per iteration on average.
They do not enter evenly: a prompt rides whole in the iteration that admits it, or,
when it exceeds the room the decode tokens leave in the ``max_num_tokens`` budget,
as full chunks of that room and a last piece, one per iteration; the other
iterations decode only. An iteration's time is the mix of those kinds weighted by
how often they occur (q = P / ISL prompts start per iteration);
for an MoE a decode-only step touches far fewer experts than one carrying a
prompt. When prompts arrive faster than one piece per iteration, every iteration
carries ``P`` tokens; when ``B + P`` exceeds the budget, every iteration runs as
several passes, re-reading the weights: full passes of the budget and one with the
rest, decode and prompt tokens in the same proportion in each. Decoding sequences
hold on average ``ISL + OSL/2`` cached tokens. With ``pp`` stages the batch splits into ``pp``
micro-batches in flight.

* TPOT = pp × (stage time of one micro-batch's iteration) + host overhead. Host time adds to the
  GPU step. The alternative, an overlapping scheduler's max(GPU step, host time) with host time 2.75x
  longer on Grace (GB200) than on x86 hosts (NVIDIA/TransformerEngine #2053: PyTorch dispatch time
  per Linear), refit worse on the validation rows (objective 0.108 -> 0.114, MdAPE 7.4 -> 9.5 %).
* output tokens/s per user = 1 / TPOT; per GPU = replicas · B / TPOT / gpus
* TTFT = the iterations a new request waits through until its first token, plus
  ``Runtime.first_token_overhead_s`` off the GPU (request handling, tokenization, the first
  token's way back); ``Deployment.arrivals`` says which. Steady arrivals: its own prompt of
  P tokens, ceil(P / C) iterations, full chunks of C and one with the rest, C =
  ``max_num_tokens`` minus the decode tokens of the *other* requests scheduled beside it
  (the new request itself is not decoding yet); under attention-DP the prompt sits on one
  attention rank, C is that rank's budget and the others' decode tokens are spread over
  the ranks. Burst arrivals: the replica's requests arrive together, and each waits for
  the chunks of the prompts ahead of it (mean over the wave; :func:`_prompt_iterations`).
  Those iterations run outside a CUDA graph, each kernel at least
  ``Runtime.eager_launch_s`` of host launch. The steady-state mix above keeps its prompt
  iterations at graph speed: with many requests in flight their GPU time dominates.
  Poisson arrivals: as steady, plus the wait of an iteration-level prompt queue (:func:`_prompt_queue`,
  :func:`co_design.perf.queueing.iteration_queue_wait`): prompts join at iteration ends, so a prompt waits
  for the iteration in progress, the prompts ahead of it (M/D/1) and the later arrivals that share its
  last iteration; ``Prediction.ttft_p99_s`` is the 99th percentile (``benchmarks/prompt_queue_sim.py``:
  0.85-1.14x of a simulated iteration-level scheduler's mean wait and 0.79-1.20x of its p99 on the
  model's own step times, prompts of 0.03-4x the iteration's room). A request's TPOT is the decode-only
  iteration plus its share of the prompts admitted while it decodes, a Poisson count of mean B:
  ``Prediction.tpot_p99_s`` takes that count's 99th percentile (the p99 over requests of their mean
  TPOT, as MLPerf limits it; steady and burst arrivals give every request the mean). MLPerf Server
  publishes that spread, p99 / mean TPOT 1.06-1.30, which the model puts at 1.05-1.28
  (``validate_perf.py --mlperf-latency``). Under attention-DP a prompt runs on its request's rank, the
  runtime's router spreading the requests over the ranks, but random arrivals come a few at a time
  (:func:`_placement`): an iteration's busiest rank paces it, so the steady state runs over whole counts of
  prompts (or busy ranks) per iteration, each with its busiest rank, rather than an even share; each rank
  queues its own prompts, and a prompt's own iterations carry the other ranks' prompts too
  (``benchmarks/prompt_queue_sim.py``: TPOT 0.98-1.02x and mean wait 0.90-1.19x of a self-consistent
  simulation of that scheduler and router, where an even spread gives 0.66-1.01x and a pooled queue
  0.34-0.92x).
  Steady arrivals keep the even spread (fixed-length benchmark runs keep the ranks in step) and do not
  queue behind one another (``benchmarks/results/ttft_load.md`` measures steady and burst against
  published rows).
* More requests than a replica holds (its KV cache at ISL+OSL, ``Runtime.max_batch``):
  :func:`predict` runs what fits and the rest wait for a slot; TTFT adds the wait, by
  Little's law (:func:`_queued`).

Pure Python.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Iterable, Sequence

from co_design.hardware import GPU, PRECISION_FIELDS, check_precision, get_gpu
from co_design.perf.memory import max_batch, memory_breakdown
from co_design.perf.ops import attention_head_dim, shards, step_ops, step_time
from co_design.perf.queueing import (busy_ranks, grouped_counts, iteration_queue_wait, poisson_quantile,
                                    prompt_counts)
from co_design.perf.types import SLO, Deployment, OpCost, Prediction, Runtime

if TYPE_CHECKING:
    from co_design.arch import Architecture

__all__ = ["predict", "max_throughput", "pareto", "parallelisms"]

_MIN_CONTEXT_CHUNK = 256  # tokens of a prompt admitted per iteration when the budget is nearly full


def _check_arch(arch: "Architecture") -> None:
    from co_design.arch import Architecture

    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a co_design.arch.Architecture, got {type(arch).__name__} "
                         "(load one with Architecture.load(path))")


def _check_formats(gpu: GPU, dep: Deployment) -> None:
    """ValueError (one line) unless ``gpu`` runs ``dep``'s weight, activation and KV-cache formats
    natively (:func:`co_design.hardware.check_precision`, the table every entry point shares)."""
    for name in PRECISION_FIELDS:
        check_precision(gpu, name, getattr(dep, name))


class _OpSums:
    """Op rows of weighted iterations summed per (name, phase), in first-seen order: counts, seconds, FLOPs and
    bytes add up (each row times its iteration's weight), the rest is the first row's. One row object per op at
    the end, not one per kind and op: a Poisson prediction weighs some 600 rows."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str], list] = {}

    def add(self, ops: list[OpCost], weight: float) -> None:
        for o in ops:
            total = self._sums.get((o.name, o.phase))
            if total is None:
                self._sums[o.name, o.phase] = [o, o.count * weight, o.time_s * weight, o.flops * weight,
                                               o.bytes * weight]
            else:
                total[1] += o.count * weight
                total[2] += o.time_s * weight
                total[3] += o.flops * weight
                total[4] += o.bytes * weight

    def rows(self) -> list[OpCost]:
        out = []
        for o, count, time_s, flops, nbytes in self._sums.values():
            row = object.__new__(OpCost)  # o with these totals (dataclasses.replace, without its overhead)
            row.__dict__.update(o.__dict__, count=count, time_s=time_s, flops=flops, bytes=nbytes)
            out.append(row)
        return out


def _prompt_iterations(dep: Deployment, a_dp: int, b: int) -> tuple[list[tuple[float, float, dict]], float]:
    """The iterations a request waits through until its first token: ``([(weight, p99 weight, step kwargs), ...],
    mean iterations)``, each weight the mean number of such iterations one request of the replica waits through,
    each p99 weight the number the request at the 99th percentile waits through (the same under steady arrivals,
    where every request waits alike).

    Steady arrivals (and any single request): one prompt, beside the decode tokens of the ``b - 1`` others on its
    scheduler. It takes ceil(P / C) iterations, full chunks of C and one with the rest, C = ``max_num_tokens``
    minus those decode tokens, the *other* requests spread over the attention-DP ranks as the step spreads them,
    so a full chunk and its decode tokens fill the budget exactly (P = C: 1 iteration, P = C + 1: 2). Equal
    chunks shrank every chunk's tokens per expert, and its padded expert tiles, when one more chunk was needed:
    a longer prompt could come out with a shorter TTFT.

    Burst arrivals: the busiest attention rank holds n = ceil(b / a_dp) prompts, all arriving together with
    nothing decoding; the runtime fills ``max_num_tokens`` per iteration with them in arrival order, so prompt
    j (from 0) has its first token after iteration ceil((j + 1) P / C) of ceil(n P / C). Every iteration but
    the last is full. A finished prompt's decode tokens in the wave's later iterations are left out (SGLang
    schedules waiting prompts before decoding; TensorRT-LLM and vLLM mix them in, at one token per request).
    The request at the 99th percentile is prompt ceil(0.99 n) - 1 of the wave.

    Poisson arrivals: as steady (a prompt's own iterations); the wait behind other prompts is added by
    :func:`_evaluate`.
    """
    rt, isl = dep.runtime, dep.isl
    mb = b / dep.pp
    context = isl + dep.osl / 2
    if dep.arrivals == "burst" and mb > 1:
        n = math.ceil(mb / a_dp)  # prompts on the busiest attention rank
        per_iteration = rt.max_num_tokens
        total = n * isl
        k = math.ceil(total / per_iteration - 1e-9)
        last = total - (k - 1) * per_iteration
        done = [math.ceil((j + 1) * isl / per_iteration - 1e-9) for j in range(n)]  # first-token iteration of each
        waits_full = sum(min(d, k - 1) for d in done) / n  # full iterations a prompt waits through, on average
        waits_last = sum(d == k for d in done) / n
        d99 = done[math.ceil(0.99 * n) - 1]  # the first-token iteration of the request at the 99th percentile
        spread = mb / n  # attention ranks holding prompts, as many as the busiest one
        kw = dict(decode=0.0, context=context, prefill_len=float(isl), prompt_ranks=spread)
        kinds = [(w, w99, dict(kw, prefill_tokens=tokens * spread)) for w, w99, tokens in
                 ((waits_full, float(min(d99, k - 1)), per_iteration), (waits_last, float(d99 == k), last))
                 if w > 0]  # the mean weight is 0 only where no prompt, the p99 one included, waits there
        return kinds, waits_full + waits_last
    others = max(0.0, (mb - 1) / a_dp)
    per_iteration = max(_MIN_CONTEXT_CHUNK, rt.max_num_tokens - others)
    k = math.ceil(isl / per_iteration - 1e-9)
    kw = dict(decode=max(0.0, mb - 1), context=context, prefill_len=float(isl), prompt_ranks=1.0)
    kinds = [(float(n), float(n), dict(kw, prefill_tokens=float(tokens)))
             for n, tokens in ((k - 1, per_iteration), (1, isl - (k - 1) * per_iteration)) if n > 0]
    return kinds, float(k)


def _ttft(arch: "Architecture", gpu: GPU, dep: Deployment, a_dp: int, b: int, with_ops: bool,
          placement: _Placement | None = None) -> tuple[float, float, list[OpCost]]:
    """Mean and 99th-percentile TTFT (seconds) of a replica holding ``b`` requests (before any queueing of
    Poisson arrivals, which :func:`_evaluate` adds), and the op rows of the mean (per op, summed over the
    iterations one request waits through) when ``with_ops``. Those iterations carry a prompt, so they run
    outside a CUDA graph, each kernel at least ``Runtime.eager_launch_s``; each adds the host's per-iteration
    time, and the request ``Runtime.first_token_overhead_s`` off the GPU."""
    rt = dep.runtime
    kinds, iterations = _prompt_iterations(dep, a_dp, b)
    if placement is not None:
        # its own iterations also carry the other ranks' prompts: in the mean as often as they come; at the 99th
        # percentile always, unless they come in under 1 % of iterations (the request's p99 meets them). A
        # prompt's last piece comes right after its full chunks, when it has some
        met = []
        for n_kind, (w, w99, kw) in enumerate(kinds):
            own = kw["prefill_tokens"]
            others = (placement.after_busy if 0 < n_kind == len(kinds) - 1 else
                      placement.busy if 2 * own >= placement.room else placement.idle)
            p_none = others.p_none
            for (share, tokens, _), (_, step) in zip(others.parts, others.beside(own, kw)):
                if tokens <= 0:
                    met.append((w * share, w99 if p_none > 0.99 else 0.0, step))
                else:  # the p99 request meets what the others carry when they carry some
                    met.append((w * share, 0.0 if p_none > 0.99 else w99 * share / (1 - p_none), step))
        kinds = met
    pf_s, pf99_s, pf_ops = 0.0, 0.0, _OpSums()
    for weight, weight99, kw in kinds:
        if with_ops:
            part = step_ops(arch, gpu, dep, phase="prefill", eager=True, **kw)
            step_s = sum(o.time_s for o in part)
            pf_ops.add(part, weight)  # per op, summed over the iterations
        else:
            step_s = sum(step_time(arch, gpu, dep, eager=True, **kw).values())
        pf_s += weight * step_s
        pf99_s += weight99 * step_s
    host = _host_s(rt, b, a_dp)
    iterations99 = sum(w99 for _, w99, _ in kinds)
    return (dep.pp * pf_s + iterations * host + rt.first_token_overhead_s,
            dep.pp * pf99_s + iterations99 * host + rt.first_token_overhead_s, pf_ops.rows())


def _round_s(arch: "Architecture", gpu: GPU, dep: Deployment, b: int, context: float, host_s: float,
             prompt_tokens: float = 0.0, prompt_ranks: float | None = None) -> float:
    """Seconds of a round of iterations (one per pipeline stage's micro-batch of ``b / pp`` requests), each
    carrying ``prompt_tokens`` of prompts beside its decode tokens (under attention-DP over ``prompt_ranks``
    ranks, None: spread over all), and the host's time; with none, what an iteration takes when no prompt rides
    in it."""
    return dep.pp * sum(step_time(arch, gpu, dep, decode=b / dep.pp, context=context, prefill_tokens=prompt_tokens,
                                  prefill_len=dep.isl, prompt_ranks=prompt_ranks).values()) + host_s


class _Rounds:
    """:func:`_round_s` of one replica at ``b`` requests, ``context`` cached tokens and ``host_s`` per round, each
    distinct round costed once: the busy-rank chain, the steady state's idle round and the per-rank queue ask for
    some of the same ones (the round with no prompt, the one with a single rank's chunk)."""

    def __init__(self, arch: "Architecture", gpu: GPU, dep: Deployment, b: int, context: float,
                 host_s: float) -> None:
        self._args = (arch, gpu, dep, b, context, host_s)
        self._seconds: dict[tuple[float, float | None], float] = {}

    def __call__(self, prompt_tokens: float = 0.0, prompt_ranks: float | None = None) -> float:
        key = (prompt_tokens, prompt_ranks)
        s = self._seconds.get(key)
        if s is None:
            s = self._seconds[key] = _round_s(*self._args, prompt_tokens, prompt_ranks)
        return s


# rows of a distribution of prompts (or busy ranks) per iteration, each a step to cost: the steady state's, and
# what one rank meets on the others, costed again for each of its own iterations and queue rounds (3 there
# instead of 5: predict 15 % faster, the simulated waits as close)
_STEADY_PARTS, _VIEW_PARTS = 5, 3


@dataclasses.dataclass(frozen=True)
class _Others:
    """Prompt tokens on attention-DP ranks in an iteration, as ``(share, tokens, busiest)`` rows: in that share of
    iterations they carry ``tokens``, ``busiest`` of them on the busiest rank (the rows' shares sum to 1; a row of
    no tokens is the iterations with none). Whole prompts or chunks, not their mean (a step's time jumps from one
    to two: :func:`co_design.perf.queueing.prompt_counts`)."""

    parts: tuple[tuple[float, float, float], ...]

    @property
    def p_none(self) -> float:
        """The share of iterations with no prompt tokens."""
        return sum(share for share, tokens, _ in self.parts if tokens <= 0)

    def beside(self, own: float, kw: dict) -> list[tuple[float, dict]]:
        """The step kwargs ``kw`` of an iteration in which one rank carries ``own`` prompt tokens, these being the
        other ranks', as ``(share, step kwargs)`` rows: the busiest rank's attention paces the step, every rank's
        tokens ride through the experts."""
        return [(share, kw if tokens <= 0 else dict(kw, prefill_tokens=own + tokens,
                                                     prompt_ranks=(own + tokens) / max(own, busiest)))
                for share, tokens, busiest in self.parts]


def _counted(pmf: list[float], tokens: float, parts: int) -> _Others:
    """:class:`_Others` of ``pmf[j]`` (weights) over ``j`` ranks each carrying a piece of ``tokens``."""
    return _Others(tuple((share, count * tokens, tokens if count else 0.0)
                         for share, count, _ in grouped_counts(pmf, parts)))


@dataclasses.dataclass(frozen=True)
class _Placement:
    """Prompt tokens on the attention-DP ranks of a replica under Poisson arrivals, each prompt on its request's
    rank (a rank's ``room`` per iteration, ``max_num_tokens`` less its share of the decode tokens): ``all`` is what
    every rank together carries in an iteration, ``busy`` what a rank carrying a full chunk of its own meets on
    the others, ``idle`` what a rank carrying none meets, ``after_busy`` what it meets in the next iteration."""

    room: float
    all: _Others
    busy: _Others
    idle: _Others
    after_busy: _Others  # what a rank meets in the iteration after one with a full chunk of its own


def _placement(arch: "Architecture", gpu: GPU, dep: Deployment, b: int, rounds: _Rounds) -> _Placement | None:
    """Where the prompts of a replica of ``b`` requests land under Poisson arrivals and attention-DP (None
    otherwise). The replica receives ``b / pp / OSL`` prompts per iteration on average. Prompts up to half a
    rank's room ride whole, a Poisson count per iteration routed each to the rank with the fewest active
    requests (:func:`co_design.perf.queueing.prompt_counts`). Longer ones keep their rank busy with one piece of at
    most the room (``chunk``) for ``ISL / chunk`` iterations, and the busy ranks cluster, a long iteration
    admitting many prompts at once (:func:`co_design.perf.queueing.busy_ranks`, on the rounds with none, one
    and every rank busy, ``b / OSL`` prompts a round); a rank with a piece meets the others as the size-biased
    busy count leaves them, a rank with none as the rest, and the iteration after one with a piece as the
    chain moves on from it. Every view is a distribution over whole prompts or busy ranks. ``rounds`` costs the
    rounds (:class:`_Rounds`).
    ``benchmarks/prompt_queue_sim.py`` checks the steady state and the waits against a simulated scheduler."""
    ranks = shards(arch, dep).a_dp
    if dep.arrivals != "poisson" or ranks <= 1:
        return None
    rt, mb = dep.runtime, b / dep.pp
    room = _rank_room(rt, mb, ranks)
    per_rank = mb / dep.osl / ranks  # prompts a rank receives per iteration
    if 2 * dep.isl <= room:
        fits = int(room // dep.isl)

        def carried(n_ranks: int, parts: int) -> _Others:
            return _Others(tuple((share, n * dep.isl, busiest * dep.isl) for share, n, busiest
                                 in prompt_counts(n_ranks * per_rank, n_ranks, fits, parts)))

        others = carried(ranks - 1, _VIEW_PARTS)
        return _Placement(room, carried(ranks, _STEADY_PARTS), others, others, others)
    # a prompt over half the room: a rank holds one piece of it per iteration, `chunk` tokens, for ISL / chunk
    # iterations
    chunk = min(float(dep.isl), room)
    t0, t1 = rounds(), rounds(chunk, 1.0)
    slope = (rounds(ranks * chunk, float(ranks)) - t1) / (ranks - 1)
    stay = 1.0 - chunk / dep.isl  # a busy rank's chance to stay busy next iteration
    pi, rate = busy_ranks(ranks, t0, t1, t1 + (ranks - 1) * slope, b / dep.osl, dep.isl / chunk)
    # a busy rank sees b - 1 others busy with weight b pi[b]; an idle rank b with weight (ranks - b) pi[b]
    busy = _counted([(j + 1) * pi[j + 1] for j in range(ranks)], chunk, _VIEW_PARTS)
    idle = _counted([(ranks - j) * pi[j] for j in range(ranks)], chunk, _VIEW_PARTS)
    # the next iteration after one with B busy ranks, this one among them: the B - 1 others each stay busy with
    # probability `stay`, and a Poisson count of mean rate x T(B) new prompts starts, capped at the others
    after = [0.0] * ranks
    for busy_now in range(1, ranks + 1):
        w = busy_now * pi[busy_now]
        if w <= 0:
            continue
        new = rate * (t1 + (busy_now - 1) * slope)
        arrive = [math.exp(-new)]
        for k in range(1, ranks):
            arrive.append(arrive[-1] * new / k)
        for kept in range(busy_now):
            pk = w * math.comb(busy_now - 1, kept) * stay ** kept * (1 - stay) ** (busy_now - 1 - kept)
            for k, pa in enumerate(arrive[:ranks - 1 - kept]):
                after[kept + k] += pk * pa
            after[ranks - 1] += pk * max(0.0, 1.0 - sum(arrive[:ranks - 1 - kept]))
    return _Placement(room, _counted(pi, chunk, _STEADY_PARTS), busy, idle, _counted(after, chunk, _VIEW_PARTS))


def _host_s(rt: Runtime, b: float, a_dp: int, passes: int = 1) -> float:
    """Host seconds of one pass of an iteration of a replica holding ``b`` requests: the per-iteration time and the
    per-request time of the requests on one attention-DP rank (the ranks schedule in parallel), over its
    ``passes``."""
    return rt.iteration_overhead_s + rt.request_overhead_s * b / a_dp / passes


def _rank_room(rt: Runtime, mb: float, a_dp: int) -> float:
    """Prompt tokens one attention-DP rank's iteration holds beside its share of the ``mb`` decode tokens (at
    least one): each rank schedules its own ``max_num_tokens``."""
    return max(1.0, math.floor(rt.max_num_tokens - mb / a_dp))


def _prompt_queue(arch: "Architecture", gpu: GPU, dep: Deployment, b: int, tpot_s: float, budget: float,
                  context: float, host_s: float, idle_s: float, placement: _Placement | None = None,
                  rounds: _Rounds | None = None) -> tuple[float, float, float]:
    """``(rho, mean wait, p99 wait)`` of a replica's prompt queue under Poisson arrivals (seconds; rho the
    fraction of time prompts keep it busy): :func:`co_design.perf.queueing.iteration_queue_wait`.

    At ``b`` requests in flight the replica completes ``lambda = b / (OSL x TPOT)`` requests per second (its
    tokens/s over OSL), and as many prompts arrive. A round of iterations (one per pipeline stage's
    micro-batch) carries the ``b / pp`` decode tokens of each micro-batch and up to ``room = budget - b / pp``
    prompt tokens beside them (``max_num_tokens`` per attention-DP rank), so ``pp x room`` per round; it takes
    ``pp`` stage steps of that size plus the host's time, as a decode round does, from the decode-only round's
    time with no prompt tokens (``idle_s``, :func:`_round_s`) to the budget-full round's.
    ``rho = lambda ISL / (pp room) x (full round)``; ``inf`` when no room is left. Under attention-DP
    (``placement``) the queue is one rank's: ``lambda / a_dp`` of the arrivals, that rank's room, its rounds
    as long as when it carries none or a full chunk beside the other ranks' prompts, whose spread lengthens
    the round in progress (``rounds``: the rounds the placement was built from, :class:`_Rounds`; required with
    ``placement``)."""
    room = budget - b / dep.pp
    if room < 1:
        return math.inf, math.inf, math.inf
    rate = b / (dep.osl * tpot_s)
    ranks = shards(arch, dep).a_dp
    if placement is not None:
        # one queue per attention-DP rank: its share of the arrivals and its own room; its iterations also carry
        # the other ranks' prompts (_placement): idle as a rank with none meets them, full as one with a chunk
        assert rounds is not None, "_evaluate passes the rounds it built the placement from"

        def seconds(others: _Others, tokens: float) -> tuple[float, tuple[float, float]]:
            """Mean of a round's seconds when this rank carries ``tokens``, and their variance and third central
            moment over what the other ranks carry."""
            kw = dict(prefill_tokens=tokens, prompt_ranks=1.0)
            parts = [(w, idle_s if k["prefill_tokens"] <= 0 else rounds(k["prefill_tokens"], k["prompt_ranks"]))
                     for w, k in others.beside(tokens, kw)]
            mean = sum(w * x for w, x in parts)
            return mean, (sum(w * (x - mean) ** 2 for w, x in parts), sum(w * (x - mean) ** 3 for w, x in parts))

        room = placement.room
        (idle_s, spread), (full, _) = seconds(placement.idle, 0.0), seconds(placement.busy, room)
        rate /= ranks
    else:
        full, spread = _round_s(arch, gpu, dep, b, context, host_s, room), (0.0, 0.0)
    rho = rate * dep.isl / (dep.pp * room) * full
    if rho >= 1:
        return rho, math.inf, math.inf
    wait, wait99 = iteration_queue_wait(rate, dep.isl, dep.pp * room, idle_s, max(full, idle_s), 0.99, spread)
    return rho, wait, wait99


def _evaluate(arch: "Architecture", gpu: GPU, dep: Deployment, batch_per_replica: int, *, with_ops: bool,
              with_ttft: bool = True) -> Prediction:
    rt = dep.runtime
    s = shards(arch, dep)
    b = max(1, batch_per_replica)
    mem = memory_breakdown(arch, gpu, dep, b)
    # ---------------------------------------------------------------- decode iteration
    mb = b / dep.pp  # micro-batch per pipeline stage
    prompt = mb * dep.isl / dep.osl  # prompt tokens per iteration, on average
    budget = rt.max_num_tokens * s.a_dp  # tokens one iteration may carry (each attention-DP rank schedules its own)
    context = dep.isl + dep.osl / 2
    # under Poisson arrivals, the rounds the idle round, the prompt placement (attention-DP) and its per-rank queue
    # cost, each once (one pass: an iteration within the budget)
    rounds = (_Rounds(arch, gpu, dep, b, context, _host_s(rt, b, s.a_dp))
              if dep.arrivals == "poisson" and mb + prompt <= budget else None)
    placement = _placement(arch, gpu, dep, b, rounds) if rounds is not None else None
    # (weight, step kwargs) of the iteration kinds of the steady state
    if mb + prompt > budget:
        # overloaded: every iteration carries more tokens than the budget and runs as `chunks` passes, filled as a
        # runtime fills its budget: chunks - 1 full passes and one with the rest, decode and prompt tokens in the
        # same proportion in each. (Equal passes shrank every pass's tokens per expert when one more pass was
        # needed, and with them the grouped GEMMs' padded tiles: more tokens per iteration, a shorter TPOT.)
        total = mb + prompt
        chunks = math.ceil(total / budget - 1e-9)
        full, rest = min(total, budget), total - (chunks - 1) * budget
        kinds = [(float(n), dict(decode=tokens * mb / total, context=context, prefill_tokens=tokens * prompt / total,
                                 prefill_len=dep.isl))
                 for n, tokens in ((chunks - 1, full), (1, rest)) if n > 0 and tokens > 0]
    else:
        # Prompts ride in the iterations they are admitted in: a prompt, or a chunk of one when it exceeds the
        # room the decode tokens leave, goes whole into one iteration; the other iterations decode only
        # (an MoE decode-only step touches far fewer experts). When prompt tokens arrive faster than one
        # piece per iteration, every iteration carries about `prompt` of them.
        chunks = 1
        room = max(1.0, math.floor(budget - mb))
        n_pieces = math.ceil(dep.isl / room - 1e-9)  # a prompt: n_pieces - 1 full chunks of `room`, then the rest
        q = prompt / dep.isl  # prompts admitted per iteration
        if placement is not None:
            # Poisson arrivals under attention-DP, each prompt on its request's rank: the iterations by their
            # whole count of prompts (or busy ranks), the busiest rank's attention pacing each (_placement)
            kinds = [(w, dict(decode=mb, context=context, prefill_tokens=tokens, prefill_len=dep.isl,
                              prompt_ranks=tokens / busiest if tokens else None))
                     for w, tokens, busiest in placement.all.parts]
        elif q * n_pieces >= 1.0:
            kinds = [(1.0, dict(decode=mb, context=context, prefill_tokens=prompt, prefill_len=dep.isl))]
        else:
            rest = dep.isl - (n_pieces - 1) * room
            kinds = [(1.0 - q * n_pieces, dict(decode=mb, context=context, prefill_tokens=0.0, prefill_len=dep.isl)),
                     (q, dict(decode=mb, context=context, prefill_tokens=rest, prefill_len=dep.isl))]
            if n_pieces > 1:
                kinds.append((q * (n_pieces - 1),
                              dict(decode=mb, context=context, prefill_tokens=room, prefill_len=dep.isl)))
    by_bound: dict[str, float] = {}
    sums = _OpSums()
    for weight, kw in kinds:
        if with_ops:
            part = step_ops(arch, gpu, dep, phase="decode", **kw)
            sums.add(part, weight)
            for o in part:
                by_bound[o.bound] = by_bound.get(o.bound, 0.0) + o.time_s * weight
        else:
            for bound_name, sec in step_time(arch, gpu, dep, **kw).items():
                by_bound[bound_name] = by_bound.get(bound_name, 0.0) + sec * weight
    ops = sums.rows()
    stage_s = sum(by_bound.values())  # one iteration (all its passes)
    host_s = _host_s(rt, b, s.a_dp, chunks)  # per pass
    tpot = dep.pp * stage_s + chunks * host_s
    tpot99, idle = tpot, math.nan
    if dep.arrivals == "poisson":
        # a request's TPOT is the decode-only iteration plus its share of the prompts admitted while it decodes:
        # Poisson with mean b (lambda x OSL x TPOT), so the prompt part of the mean TPOT scales with that count
        idle = rounds() if chunks == 1 and rounds is not None else _round_s(arch, gpu, dep, b, context, host_s)
        tpot99 = max(tpot, idle + (tpot - idle) * poisson_quantile(b, 0.99) / b)
    per_user = 1.0 / tpot
    per_gpu = dep.replicas * b / tpot / dep.gpus
    bound = max(by_bound, key=by_bound.get) if by_bound else "memory"
    # ------------------------------------------------------------------ TTFT
    ttft = ttft99 = float("nan")
    pf_ops: list[OpCost] = []
    notes: list[str] = []
    if with_ttft:
        ttft, ttft99, pf_ops = _ttft(arch, gpu, dep, s.a_dp, b, with_ops, placement)
        if dep.arrivals == "poisson":
            rho, wait, wait99 = _prompt_queue(arch, gpu, dep, b, tpot, budget, context, host_s, idle, placement,
                                              rounds)
            ttft, ttft99 = ttft + wait, ttft99 + wait99
            notes.append(f"Poisson arrivals: prompts keep {'each attention-DP rank' if placement else 'the replica'} "
                         f"busy {rho:.0%} of the time; a prompt waits "
                         f"{wait * 1e3:,.1f} ms on average, {wait99 * 1e3:,.1f} ms at p99, for the iteration in "
                         "progress, the prompts ahead of it and those that share its last iteration" if rho < 1 else
                         "Poisson arrivals: prompts arrive faster than the replica prefills them beside its "
                         "decode tokens: the queue, and TTFT, grow without bound")
    if arch.mla is None and attention_head_dim(arch.head_dim, gpu) != arch.head_dim:
        d = attention_head_dim(arch.head_dim, gpu)
        notes.append(f"head_dim {arch.head_dim} has no fused attention kernel on {gpu.name} (sizes "
                     f"{list(gpu.attention_head_dims)}): runs padded to {d}, attention math x{d / arch.head_dim:.2f}")
    if chunks > 1:
        notes.append(f"iteration of {mb + prompt:.0f} tokens exceeds max_num_tokens={rt.max_num_tokens}"
                     f"{f' x {s.a_dp} attention-DP ranks' if s.a_dp > 1 else ''}: runs as {chunks} chunks")
    if not mem.fits:
        notes.append("does not fit: weights + activations + reserve + KV cache exceed usable HBM "
                     f"({mem.total_bytes / 1e9:.1f} GB needed of {mem.capacity_bytes / 1e9:.1f} GB)")
    return Prediction(
        output_tokens_per_s_per_gpu=per_gpu,
        output_tokens_per_s_per_user=per_user,
        ttft_s=ttft,
        tpot_s=tpot,
        ttft_p99_s=ttft99,
        tpot_p99_s=tpot99,
        batch=b * dep.replicas,
        fits=mem.fits,
        bound=bound,
        memory=mem,
        ops=(ops + pf_ops) if with_ops else [],
        deployment=dep.replace(concurrency=b * dep.replicas) if with_ops or with_ttft else dep,
        gpu=gpu.name,
        notes=tuple(notes),
    )


def predict(arch: "Architecture", gpu: "GPU | str", deployment: Deployment) -> Prediction:
    """Performance of ``deployment`` at ``deployment.concurrency`` requests in flight.

    A replica runs at most what its KV cache (at ISL+OSL) and ``Runtime.max_batch``
    hold; more requests wait for a slot (``batch`` counts those running, TTFT the
    wait). A deployment whose weights do not fit is returned with ``fits=False`` and
    its memory breakdown (not an exception). Nonsense (a degree that does not
    divide what it splits) raises ValueError naming the value.
    """
    _check_arch(arch)
    gpu = get_gpu(gpu)
    if deployment.concurrency is None:
        raise ValueError("predict needs Deployment.concurrency (requests in flight); "
                         "use max_throughput(...) to let the model choose it")
    shards(arch, deployment)  # validate
    _check_formats(gpu, deployment)
    c, r = deployment.concurrency, deployment.replicas
    b = math.ceil(c / r)  # the busiest replica: it sets TPOT, TTFT and the op table
    cap = max_batch(arch, gpu, deployment)  # requests a replica runs at once (0: the weights do not fit)
    p = _evaluate(arch, gpu, deployment, min(b, cap) if cap else b, with_ops=True)
    if cap and b > cap:
        p = _queued(p, deployment, b, cap)
    if c == b * r:
        return p
    # c requests over r replicas: c % r replicas hold b, the rest b - 1 (idle when b == 1); sum their rates
    full = c - (b - 1) * r
    run, rest = (min(b, cap), min(b - 1, cap)) if cap else (b, b - 1)  # requests each kind of replica runs
    tok_s = full * run / p.tpot_s
    if rest:
        tok_s += (r - full) * rest / _evaluate(arch, gpu, deployment, rest, with_ops=False, with_ttft=False).tpot_s
    return dataclasses.replace(p, output_tokens_per_s_per_gpu=tok_s / deployment.gpus,
                               batch=full * run + (r - full) * rest,
                               deployment=p.deployment.replace(concurrency=c),
                               notes=p.notes + (f"{c} requests over {r} replicas: {full} hold {b}, "
                                                f"{r - full} hold {b - 1}; TPOT/TTFT of the busiest",))


def _queued(p: Prediction, dep: Deployment, b: int, cap: int) -> Prediction:
    """A replica holding ``b`` requests runs ``cap`` of them (its KV cache, or ``Runtime.max_batch``, holds no
    more); the others wait for a slot, as every runtime queues them. Each slot serves one request at a time,
    for ``S = TTFT + (OSL - 1) TPOT`` at the running batch, so the replica completes ``cap / S`` requests per
    second, and by Little's law a request spends ``b / (cap / S)`` seconds in the system, ``S (b / cap - 1)``
    of them waiting before its prompt starts. TTFT includes that wait (its mean, in the p99 TTFT too); TPOT and
    tokens/s are the running batch's."""
    service = p.ttft_s + (dep.osl - 1) * p.tpot_s
    wait = service * (b / cap - 1)
    return dataclasses.replace(
        p, ttft_s=p.ttft_s + wait, ttft_p99_s=p.ttft_p99_s + wait,
        deployment=p.deployment.replace(concurrency=dep.concurrency),
        notes=p.notes + (f"{b} requests per replica exceed the {cap} it runs at once (KV cache at ISL+OSL, "
                         f"Runtime.max_batch): {b - cap} wait for a slot, a request {wait:.3g} s on average, "
                         "counted in TTFT; TPOT and tokens/s are those of the running batch",))


def _unstable(p: Prediction) -> bool:
    """A batch whose Poisson arrivals bring prompts faster than the replica prefills them: no steady state
    (its queue, and TTFT, grow without bound), so :func:`max_throughput` and :func:`pareto` pass it by."""
    return p.deployment.arrivals == "poisson" and not math.isfinite(p.ttft_s)


def _batch_grid(b_max: int, step: float = 1.25) -> list[int]:
    """1, 2, 3, 4, 5, 6, 8, ... (x ``step``) up to b_max, b_max included."""
    out, x = [], 1.0
    while x < b_max:
        out.append(int(x))
        x = max(x + 1, x * step)
    out.append(b_max)
    return sorted(set(out))


def max_throughput(arch: "Architecture", gpu: "GPU | str", deployment: Deployment, *,
                   slo: SLO | None = None) -> Prediction:
    """Highest output tokens/s per GPU over the batch sizes that fit (and meet ``slo``).

    ``deployment.concurrency`` is ignored. If the weights do not fit, returns the
    batch-1 prediction with ``fits=False``; if no batch meets the SLO, returns
    the batch that comes closest (fastest per user) with a note.
    """
    _check_arch(arch)
    gpu = get_gpu(gpu)
    dep = deployment
    shards(arch, dep)
    _check_formats(gpu, dep)
    b_max = max_batch(arch, gpu, dep)
    if b_max < 1:
        return _evaluate(arch, gpu, dep, 1, with_ops=True)
    need_ttft = (slo is not None and slo.needs_ttft) or dep.arrivals == "poisson"
    best, best_b, fallback = None, None, None
    seen: dict[int, Prediction] = {}

    def consider(b: int) -> None:
        nonlocal best, best_b, fallback
        if b in seen or not 1 <= b <= b_max:
            return
        p = seen[b] = _evaluate(arch, gpu, dep, b, with_ops=False, with_ttft=need_ttft)
        if (slo is not None and not slo.met(p)) or _unstable(p):
            if fallback is None or p.output_tokens_per_s_per_user > fallback[0]:
                fallback = (p.output_tokens_per_s_per_user, b)
            return
        if best is None or p.output_tokens_per_s_per_gpu > best.output_tokens_per_s_per_gpu:
            best, best_b = p, b

    # coarse pass over powers of two (and b_max), then a ~1.1x-step refinement around the best
    b = 1
    while b < b_max:
        consider(b)
        b *= 2
    consider(b_max)
    if best_b is not None:
        lo, hi = max(1, best_b // 2), min(b_max, best_b * 2)
        for b in _batch_grid(hi, step=1.1):
            if b >= lo:
                consider(b)
    if best_b is None:
        out = _evaluate(arch, gpu, dep, fallback[1], with_ops=True)
        return dataclasses.replace(out, notes=out.notes + ("no batch size meets the SLO; closest shown",))
    return _evaluate(arch, gpu, dep, best_b, with_ops=True)


def parallelisms(arch: "Architecture", gpus: int, *, pp: Sequence[int] = (1,), helix: bool = False,
                 **fixed: object) -> list[Deployment]:
    """Valid deployments of ``gpus`` GPUs: tp over divisors, ep in {1, tp} for MoE, attention-DP on/off.

    ``fixed`` holds other Deployment fields (precisions, isl, osl, runtime).
    """
    out: list[Deployment] = []
    for p in pp:
        for tp in [d for d in range(1, gpus + 1) if gpus % (d * p) == 0]:
            eps = sorted({1, tp}) if arch.is_moe else [1]
            dps = [False, True] if tp > 1 else [False]
            helixes = sorted({1, *(h for h in (2, 4, 8) if helix and tp % h == 0 and h <= tp)})
            for ep in eps:
                for dp in dps:
                    for hx in helixes:
                        if dp and hx > 1:
                            continue
                        try:
                            d = Deployment(gpus=gpus, tp=tp, ep=ep, pp=p, attention_dp=dp, helix=hx, **fixed)
                            shards(arch, d)
                        except ValueError:
                            continue
                        out.append(d)
    return out


def _front(points: list[Prediction]) -> list[Prediction]:
    """Non-dominated points on (tokens/s per GPU, tokens/s per user), sorted by per-user speed."""
    pts = sorted(points, key=lambda p: (-p.output_tokens_per_s_per_user, -p.output_tokens_per_s_per_gpu))
    front, best_gpu = [], -1.0
    for p in pts:
        if p.output_tokens_per_s_per_gpu > best_gpu:
            front.append(p)
            best_gpu = p.output_tokens_per_s_per_gpu
    return sorted(front, key=lambda p: p.output_tokens_per_s_per_user)


def pareto(arch: "Architecture", gpu: "GPU | str", deployment: Deployment, *, slo: SLO | None = None,
           deployments: Iterable[Deployment] | None = None, concurrencies: Iterable[int] | None = None,
           with_ops: bool = False) -> list[Prediction]:
    """Throughput-vs-interactivity Pareto front over concurrency x parallelism.

    ``deployments``: the parallel layouts to compare (default: :func:`parallelisms`
    of ``deployment.gpus`` GPUs with ``deployment``'s precisions, ISL/OSL and
    runtime). ``concurrencies``: requests in flight per deployment (default: a
    ~1.25x geometric grid up to what fits). Points that do not fit or miss the
    SLO are dropped. Returned sorted by output tokens/s per user, ascending.
    """
    _check_arch(arch)
    gpu = get_gpu(gpu)
    if deployments is None:
        _check_formats(gpu, deployment)
        fixed = {f.name: getattr(deployment, f.name) for f in dataclasses.fields(Deployment)
                 if f.name in ("weights", "activations", "kv_cache", "isl", "osl", "runtime")}
        deployments = parallelisms(arch, deployment.gpus, pp=sorted({1, deployment.pp}), **fixed)
    conc = sorted(set(concurrencies)) if concurrencies is not None else None
    points: list[Prediction] = []
    for dep in deployments:
        shards(arch, dep)
        _check_formats(gpu, dep)
        b_max = max_batch(arch, gpu, dep)
        if b_max < 1:
            continue
        grid = [math.ceil(c / dep.replicas) for c in conc] if conc else _batch_grid(b_max)
        need_ttft = (slo is not None and slo.needs_ttft) or dep.arrivals == "poisson"
        for b in sorted(set(grid)):
            if b > b_max:
                continue
            p = _evaluate(arch, gpu, dep, b, with_ops=False, with_ttft=need_ttft)
            if (slo is not None and not slo.met(p)) or _unstable(p):
                continue
            points.append(p)
    # the sweep skips TTFT unless the SLO needs it: fill it (and ops when asked) for the few front points
    return [_evaluate(arch, gpu, p.deployment, math.ceil(p.batch / p.deployment.replicas), with_ops=with_ops)
            for p in _front(points)]
