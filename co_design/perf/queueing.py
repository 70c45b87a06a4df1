"""Waiting times of queues of prompts: the M/D/1 queue, and the iteration-level prompt queue of a runtime.

A replica's prompts queue under Poisson arrivals (``Deployment.arrivals = "poisson"``):
they arrive at random, each needs the same prefill work (ISL tokens), and the replica
works through them in arrival order beside its decode tokens
(:func:`co_design.perf.serving.predict`).

M/D/1 (one server, equal service times), the fluid part of that queue:

* Mean wait (Pollaczek-Khinchine, exact for M/D/1): ``W = rho S / (2 (1 - rho))``.
* Quantiles: Erlang's exact distribution, ``P(W <= t) = (1 - rho) sum_{k=0}^{floor(t/S)}
  (lambda (kS - t))^k / k! exp(-lambda (kS - t))`` (Erlang 1909; Franx, "A simple
  solution for the M/D/c waiting time distribution", Oper. Res. Lett. 29, 2001),
  inverted by bisection while ``lambda t <= 20``; its alternating terms reach
  ``exp(lambda t)``, so beyond that (heavy load, far tails) the Cramer-Lundberg
  asymptote ``P(W > t) ~ C exp(-gamma t)``, ``gamma`` the positive root of
  ``lambda (exp(gamma S) - 1) = gamma`` and ``C = (1 - rho) / (lambda S exp(gamma S)
  - 1)`` (the Cramer-Lundberg approximation; Asmussen, *Applied Probability and
  Queues*, 2nd ed., 2003), exact for M/M/1 and, for M/D/1 at such loads, within 2e-5
  of the exact tail probability. ``tests/perf/test_queueing.py`` checks the mean and
  quantiles against a simulated queue, and the quantiles against the exact sum
  evaluated in high precision.

The iteration-level queue (:func:`iteration_queue_wait`): a runtime admits prompts only
at an iteration's end, fills each iteration's room with waiting prompt tokens in arrival
order (chunked), and a prompt's first token comes when the whole iteration holding its
last chunk ends. An iteration with ``x`` prompt tokens takes ``T0 + c x``; one prompt's
own prefill is ``a = c ISL`` seconds. Counted from its arrival, a prompt's wait is exactly
the rest of the iteration in progress, plus the backlog ahead of it at the next iteration
end at ``Tf / room`` seconds a token (``Tf = T0 + c room``, the budget-full iteration),
plus an alignment term under ``T0``, plus ``c`` per token of later prompts that share its
last iteration. In closed form:

1. the iteration in progress and the prompts ahead, in two limits:

   * batched (prompts short beside the room): every prompt that arrived during an
     iteration enters the next one together, so iteration lengths follow the chain
     ``T' = T0 + a N``, ``N`` Poisson with mean ``lambda T``; its stationary moments
     ``E[T^k]``, k = 1..3, solve in closed form (``E[T] = T0 / (1 - lambda a)``). An
     arrival lands in an iteration of length-biased length ``tau`` with ``U tau`` of it
     left (``U`` uniform), and the ``Poisson(lambda U tau)`` prompts that arrived in it
     before it each add ``a``: mean ``E[tau] (1 + lambda a) / 2``;
   * queued (prompts long beside the room): the M/D/1 queue above with
     ``S = ISL / room x Tf``, plus the rest of a decode-only iteration, ``T0 / 2`` (the
     decomposition of an M/G/1 queue with vacations: Fuhrmann and Cooper, "Stochastic
     decompositions in the M/G/1 queue with generalized vacations", Oper. Res. 33, 1985);

2. the later prompts that share its last iteration: those that arrive before that
   iteration starts (Poisson over the wait above plus its own full chunks), as many of
   their tokens as fit in the room its last chunk leaves.

Each limit adds them, and the larger limit answers, for the mean and the quantile apart.
The quantile is a gamma law's with the sum's mean and variance (part 1's from the same
moments, ``E[W^2] = 2 W^2 + lambda S^3 / (3 (1 - rho))`` for M/D/1's,
part 2's from its Poisson sum; the parts taken as independent). Against a simulation of
that scheduler (``benchmarks/prompt_queue_sim.py``) the mean comes within 0.87-1.14x and
the p99 within 0.85-1.19x on the serving model's step times (prompts 0.03-4x the room,
busy 4-85 % of the time), and within 0.84-1.09x and 0.76-1.18x on 81 cases of iterations
linear in their tokens (``tests/benchmarks/test_prompt_queue_sim.py``); the fluid M/D/1
alone gave 0.02-0.96x and 0.21-1.08x, short prompts' waits being mostly the iteration in
progress. The gamma law's tail is longer than a bounded wait's: a lone arrival's wait is
uniform over the decode-only iteration, whose p99 the gamma law puts 1.41x too far. The
mean grows with the load; the p99 does too from 1 % busy (``test_queueing``'s
properties), and below that can dip a few per cent as a rare shared iteration becomes
less rare.

Attention-DP ranks (:func:`prompt_counts`, :func:`busy_ranks`): each prompt runs on its
request's rank, and the runtime's router sends each request to the rank with the fewest
active requests, but random arrivals come a few at a time, so an iteration carries prompt
tokens on some ranks and none on others, and its busiest rank paces it. Prompts up to half a
rank's room: a Poisson count of prompts per iteration, the busiest rank carrying
``ceil(n / ranks)`` of ``n``, in whole counts. Longer ones: a Markov chain of the number of
busy ranks, each new prompt on a rank of its own, in which a long iteration admits many
prompts at once, so busy ranks cluster. A rank's queue (:func:`iteration_queue_wait` with
``outside``) sees iterations spread by the other ranks' prompts.

Units: seconds for service and iteration times and the waits, prompts per second for
arrival rates, tokens for prompt sizes and room; ``rho`` is the server's busy fraction
(arrival rate x service time), dimensionless. Pure Python.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

__all__ = ["md1_mean_wait", "md1_wait_quantile", "md1_wait_variance", "gamma_quantile", "poisson_quantile",
           "iteration_queue_wait", "prompt_counts", "grouped_counts", "busy_ranks"]


def _check(rho: float, service_s: float) -> None:
    if not rho >= 0:
        raise ValueError(f"rho (utilization) must be >= 0, got {rho}")
    if not service_s > 0:
        raise ValueError(f"service_s must be > 0 seconds, got {service_s}")


def md1_mean_wait(rho: float, service_s: float) -> float:
    """Mean seconds an arrival waits before its service starts; ``inf`` when ``rho >= 1`` (the queue grows
    without bound)."""
    _check(rho, service_s)
    if rho >= 1:
        return math.inf
    return rho * service_s / (2 * (1 - rho))


def _decay_rate(rho: float, service_s: float) -> float:
    """gamma > 0 with lambda (exp(gamma S) - 1) = gamma, lambda = rho / S; in units of x = gamma S it is the
    root of rho (exp(x) - 1) = x, which lies in (0, 2 (1 - rho) / rho] (exp(x) - 1 >= x + x^2 / 2)."""
    f = lambda x: rho * math.expm1(x) - x  # noqa: E731  (< 0 below the root, > 0 above it)
    lo, hi = 0.0, 2 * (1 - rho) / rho
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return (lo + hi) / 2 / service_s


def _exact_cdf(lam: float, service_s: float, rho: float, t: float) -> float:
    return (1 - rho) * sum((lam * (k * service_s - t)) ** k / math.factorial(k) * math.exp(-lam * (k * service_s - t))
                           for k in range(int(t // service_s) + 1))


_EXACT_MAX_LAMBDA_T = 20.0  # exp(20) = 5e8 x 1e-16: the exact sum stays good to 1e-7 in probability


def md1_wait_quantile(rho: float, service_s: float, q: float) -> float:
    """Seconds of wait that a fraction ``q`` of arrivals stay within (the ``q`` quantile of the wait); 0 when
    at least ``q`` of them find the server idle (P(W = 0) = 1 - rho); ``inf`` when ``rho >= 1``."""
    _check(rho, service_s)
    if not 0 < q < 1:
        raise ValueError(f"q (quantile) must be in (0, 1), e.g. 0.99, got {q}")
    if rho >= 1:
        return math.inf
    if rho <= 1 - q:
        return 0.0
    lam = rho / service_s
    gamma = _decay_rate(rho, service_s)
    c = (1 - rho) / (lam * service_s * math.exp(gamma * service_s) - 1)
    asymptote = max(0.0, math.log(c / (1 - q)) / gamma)
    hi = 2 * asymptote + service_s
    if lam * hi > _EXACT_MAX_LAMBDA_T or _exact_cdf(lam, service_s, rho, hi) < q:
        return asymptote
    lo = 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if _exact_cdf(lam, service_s, rho, mid) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi


def md1_wait_variance(rho: float, service_s: float) -> float:
    """Variance (seconds squared) of an M/D/1 wait: ``E[W^2] - W^2`` with ``E[W^2] = 2 W^2 + lambda S^3 / (3 (1 -
    rho))`` (Takacs' recursion for the moments of M/G/1); ``inf`` when ``rho >= 1``."""
    w = md1_mean_wait(rho, service_s)
    if math.isinf(w):
        return math.inf
    return w * w + rho * service_s ** 2 / (3 * (1 - rho))


def _gamma_p(k: float, x: float) -> float:
    """Regularized lower incomplete gamma ``P(k, x)``: its power series below ``x = k + 1``, the continued fraction
    of ``Q = 1 - P`` (modified Lentz) above, both to ~1e-15."""
    if x <= 0:
        return 0.0
    log_front = -x + k * math.log(x) - math.lgamma(k)
    if x < k + 1:
        term = total = 1.0 / k
        n = 0
        while abs(term) > 1e-16 * abs(total) and n < 10_000:
            n += 1
            term *= x / (k + n)
            total += term
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - k
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - k)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def gamma_quantile(mean: float, variance: float, q: float) -> float:
    """The ``q`` quantile of the gamma law of this mean and variance (shape ``k = mean^2 / variance``, scale
    ``variance / mean``): Newton's method on :func:`_gamma_p` from the Wilson-Hilferty approximation, kept inside
    a bracket by bisection, to 1e-12 relative. ``mean`` when the variance is 0."""
    if not 0 < q < 1:
        raise ValueError(f"q (quantile) must be in (0, 1), e.g. 0.99, got {q}")
    if not (mean >= 0 and variance >= 0):
        raise ValueError(f"mean and variance must be >= 0, got {mean}, {variance}")
    if math.isinf(mean) or math.isinf(variance):
        return math.inf
    if mean == 0 or variance == 0:
        return mean
    k, scale = mean * mean / variance, variance / mean
    z = statistics.NormalDist().inv_cdf(q)
    x = max(k * (1 - 1 / (9 * k) + z / (3 * math.sqrt(k))) ** 3, 1e-300)
    lo, hi = 0.0, math.inf
    for _ in range(200):
        p = _gamma_p(k, x)
        if p < q:
            lo = x
        else:
            hi = x
        density = math.exp((k - 1) * math.log(x) - x - math.lgamma(k))
        step = (p - q) / density if density > 0 else math.inf
        nxt = x - step
        if not lo < nxt < hi:  # Newton left the bracket: halve it (double while there is no upper end)
            nxt = (lo + hi) / 2 if math.isfinite(hi) else 2 * x
        if abs(nxt - x) <= 1e-12 * x:
            return nxt * scale
        x = nxt
    return x * scale


def poisson_quantile(mean: float, q: float) -> float:
    """The ``q`` quantile of a Poisson count of this mean: the least ``k`` with ``P(N <= k) >= q``, summing the pmf
    from 12 standard deviations below the mean (the mass below is under 1e-30), in logs so that no term
    underflows; about ``15 sqrt(mean)`` terms."""
    if not 0 < q < 1:
        raise ValueError(f"q (quantile) must be in (0, 1), e.g. 0.99, got {q}")
    if not mean >= 0:
        raise ValueError(f"mean must be >= 0, got {mean}")
    if mean == 0:
        return 0.0
    k = max(0, math.floor(mean - 12 * math.sqrt(mean)))
    p = math.exp(-mean + k * math.log(mean) - math.lgamma(k + 1))
    cdf = p
    while cdf < q:
        k += 1
        p *= mean / k
        cdf += p
    return float(k)


_PARTS = 5  # rows at most of a prompt-count distribution (each is a step for the caller to cost)


def grouped_counts(pmf: list[float], parts: int = _PARTS,
                   value: Callable[[int], float] | None = None) -> list[tuple[float, float, float]]:
    """``[(share, count, value), ...]`` of a distribution over counts, ``pmf[count]`` (weights, normalized here), in
    at most ``parts`` rows: count 0 on its own, the others each on its own where they fit, else in groups of
    about equal share at their mean count (which keeps the mean) and the mean of ``value(count)`` over the group
    (``value`` None: the count)."""
    value = value or float
    total = sum(pmf)
    rows = [(pmf[0] / total, 0.0, value(0))] if pmf[0] > 1e-12 * total else []
    counts = [(p / total, k) for k, p in enumerate(pmf) if k and p > 0]
    if len(counts) < parts:
        return rows + [(p, float(k), value(k)) for p, k in counts]
    target = sum(p for p, _ in counts) / (parts - 1)
    share = weighted = valued = 0.0
    for p, k in counts:
        share, weighted, valued = share + p, weighted + p * k, valued + p * value(k)
        if share >= target * (1 - 1e-9) and len(rows) < parts - 1 or k == counts[-1][1]:
            rows.append((share, weighted / share, valued / share))
            share = weighted = valued = 0.0
    return rows


def prompt_counts(mean_prompts: float, ranks: int, fits: int, parts: int = _PARTS) -> list[tuple[float, float, float]]:
    """``[(share, prompts, busiest), ...]``: the prompts one iteration of ``ranks`` attention-DP ranks carries when
    requests arrive at random, ``mean_prompts`` per iteration over all ranks on average (a Poisson count), each
    row a share of iterations, its count of prompts and the count on the busiest rank; the first row is the
    iterations with none.

    The runtime routes each request to the rank with the fewest active requests (TensorRT-LLM's default
    attention-DP router, ``tensorrt_llm/_torch/pyexecutor/scheduler/adp_router.py``, ``DefaultADPRouter``: a heap
    on the ranks' active prompt tokens, then requests, then rank), so the ``n`` prompts admitted together spread
    over the ranks and the busiest carries ``ceil(n / ranks)`` (at most ``fits``, a rank's room in prompts). The
    router balances active requests, not one iteration's prompts, so ranks a few requests short can take two
    while another takes none: with 5.6 prompts an iteration on 8 ranks the simulated router's busiest rank
    carries 1.31 on average, where this says 1 (``tests/benchmarks/test_prompt_queue_sim.py``).

    Whole counts, not their mean: a step's time jumps from one prompt to two (the expert GEMMs' tiles, the
    busiest rank's attention), so the step at the mean count is not the mean step (the mean count, 1.3 prompts
    of 1024 tokens on 4 ranks, put DeepSeek-V3's TPOT 14 % over a simulated scheduler's,
    ``benchmarks/prompt_queue_sim.py``). Past ``parts`` rows the counts above 0 are grouped into ``parts - 1``
    rows of about equal share at their mean count, which keeps the mean."""
    if ranks < 1 or fits < 1 or not mean_prompts >= 0 or parts < 2:
        raise ValueError(f"ranks={ranks} and fits={fits} must be >= 1, mean_prompts={mean_prompts} >= 0 and "
                         f"parts={parts} >= 2")
    if mean_prompts == 0:
        return [(1.0, 0.0, 0.0)]
    spread = 12.0 * math.sqrt(mean_prompts) + 12.0
    lo, hi = max(0, math.floor(mean_prompts - spread)), math.ceil(mean_prompts + spread)
    log_m = math.log(mean_prompts)
    pmf = [0.0] * lo + [math.exp(k * log_m - mean_prompts - math.lgamma(k + 1)) for k in range(lo, hi + 1)]
    return grouped_counts(pmf, parts, lambda n: float(min(-(-n // ranks), fits)))


def _stationary(rows: list[list[float]]) -> list[float]:
    """Stationary distribution of a finite Markov chain from its transition rows, by the GTH algorithm
    (Grassmann, Taksar and Heyman, "Regenerative analysis and steady state distributions for Markov chains",
    Oper. Res. 33, 1985): states folded away from the last, with no subtraction, so no cancellation and no
    pivoting. Where the chain, folded down to state ``k``, never leaves ``k`` downwards (so many arrivals that
    their chance of none underflows), the states below ``k`` are transient and get 0."""
    n = len(rows)
    p = [list(r) for r in rows]
    start = 0
    for k in range(n - 1, 0, -1):
        pk = p[k]
        s = sum(pk[:k])  # the chance of leaving state k downwards
        if s <= 0:
            start = k
            break
        for i in range(k):
            f = p[i][k] / s
            if f:
                pi = p[i]
                for j in range(k):
                    pi[j] += f * pk[j]
    x = [0.0] * start + [1.0]
    for j in range(start + 1, n):
        x.append(sum(x[i] * p[i][j] for i in range(start, j)) / sum(p[j][:j]))
    total = sum(x)
    return [v / total for v in x]


def busy_ranks(ranks: int, idle_s: float, one_s: float, all_s: float, prompts_per_iteration: float,
               iterations_per_prompt: float) -> tuple[list[float], float]:
    """``(pi, lambda)``: the stationary distribution ``pi[B]`` of the number ``B`` of attention-DP ranks that carry
    a piece of a long prompt in an iteration, when prompts arrive at random (Poisson), each new one on a rank of
    its own (the runtime's router sends a request to a rank with the fewest active requests), and keep it busy
    ``iterations_per_prompt`` (>= 1) iterations, and the arrival rate ``lambda`` (prompts per second).

    An iteration with ``B`` busy ranks lasts ``T(B)``: ``idle_s`` with none, ``one_s`` with one, rising linearly
    to ``all_s`` with all (each busy rank's chunk rides through the experts; the busiest rank's attention, one
    chunk, paces the rest). Prompts arrive in proportion to time, so a long iteration lets more of them in: the
    next iteration's busy ranks are the ones still busy (each continues with probability ``1 - 1 / d``, ``d`` =
    ``iterations_per_prompt``) plus a Poisson count of mean ``lambda T(B)`` new ones, at most ``ranks``. The
    rate ``lambda`` is the one at which ``prompts_per_iteration`` arrive per iteration on average
    (``lambda E[T] = m``), found by a bracketed secant search, ``lambda E[T]`` rising with ``lambda``. That
    feedback is why busy ranks cluster: independent ranks would each be busy a share ``m d / ranks`` of
    iterations; a long iteration admits many prompts at once (``benchmarks/prompt_queue_sim.py`` simulates the
    scheduler the chain stands for). States beyond 12 standard deviations above the fluid mean busy count
    ``m d`` are dropped (their mass folds into the last)."""
    if ranks < 1 or not iterations_per_prompt >= 1 or not prompts_per_iteration >= 0 or not 0 < idle_s <= one_s:
        raise ValueError(f"ranks={ranks} must be >= 1, iterations_per_prompt={iterations_per_prompt} >= 1, "
                         f"prompts_per_iteration={prompts_per_iteration} >= 0 and 0 < idle_s={idle_s} <= "
                         f"one_s={one_s}")
    if prompts_per_iteration == 0:
        return [1.0] + [0.0] * ranks, 0.0
    fluid = prompts_per_iteration * iterations_per_prompt
    top = min(ranks, math.ceil(fluid + 12 * math.sqrt(fluid) + 12))
    slope = (all_s - one_s) / (ranks - 1) if ranks > 1 else 0.0
    t = [idle_s] + [one_s + (b - 1) * slope for b in range(1, top + 1)]
    stay = 1.0 - 1.0 / iterations_per_prompt
    keep = [[math.comb(b, j) * stay ** j * (1 - stay) ** (b - j) for j in range(b + 1)] for b in range(top + 1)]

    def chain(lam: float) -> list[float]:
        rows = []
        for b in range(top + 1):
            mean = lam * t[b]
            pois = [math.exp(-mean)]
            for k in range(1, top + 1):
                pois.append(pois[-1] * mean / k)
            tail, below = [0.0] * (top + 1), 0.0  # tail[n] = P(N >= n)
            for n in range(top + 1):
                tail[n] = max(0.0, 1.0 - below)
                below += pois[n]
            row = [0.0] * (top + 1)
            for j, pj in enumerate(keep[b]):
                if pj:
                    for k in range(top - j):
                        row[j + k] += pj * pois[k]
                    row[top] += pj * tail[top - j]
            rows.append(row)
        return _stationary(rows)

    def excess(lam: float) -> tuple[float, list[float], float]:
        pi = chain(lam)
        mean_t = sum(p * x for p, x in zip(pi, t))
        return lam * mean_t - prompts_per_iteration, pi, mean_t

    # root of lambda E[T] - m, which rises with lambda and lies in [m / T(top), m / T(0)] (E[T] between them).
    # Start at the fluid busy count's iteration, step once as lambda = m / E[T], then secant steps kept inside
    # the bracket (bisection where one would leave it): mostly 3-6 chains (regula falsi from [0, m / T(0)] took
    # 4-12)
    x = min(float(top), fluid)
    t_fluid = idle_s + x * (one_s - idle_s) if x < 1 else one_s + (x - 1) * slope
    lo, hi = prompts_per_iteration / t[top], prompts_per_iteration / idle_s
    lam = min(hi, max(lo, prompts_per_iteration / t_fluid))
    f, pi, mean_t = excess(lam)
    rate, prev = lam, None
    for _ in range(60):
        if abs(f) <= 1e-9 * prompts_per_iteration or hi - lo <= 1e-12 * hi:
            break
        if f > 0:
            hi = lam
        else:
            lo = lam
        if prev is None:
            nxt = prompts_per_iteration / mean_t  # the fixed-point step
        else:
            p_lam, p_f = prev
            nxt = lam - f * (lam - p_lam) / (f - p_f) if f != p_f else 0.5 * (lo + hi)
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        prev = (lam, f)
        lam = nxt
        f, pi, mean_t = excess(lam)
        rate = lam
    return pi + [0.0] * (ranks - top), rate


def _shared_room(mean_arrivals: float, prompt_tokens: float, free_tokens: float) -> tuple[float, float]:
    """First two moments (tokens, tokens squared) of ``min(prompt_tokens x N, free_tokens)``, N Poisson with this
    mean: the later prompts' tokens that fit in the room a prompt's last iteration has left."""
    if free_tokens <= 0 or mean_arrivals <= 0:
        return 0.0, 0.0
    p, seen, m1, m2, j = math.exp(-mean_arrivals), 0.0, 0.0, 0.0, 0
    while prompt_tokens * j < free_tokens:
        x = prompt_tokens * j
        m1, m2, seen = m1 + p * x, m2 + p * x * x, seen + p
        j += 1
        p *= mean_arrivals / j
    rest = max(0.0, 1.0 - seen)  # N large enough to fill the room
    return m1 + rest * free_tokens, m2 + rest * free_tokens ** 2


def iteration_queue_wait(arrival_rate: float, prompt_tokens: float, room_tokens: float, idle_iteration_s: float,
                         full_iteration_s: float, q: float = 0.99,
                         outside: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """Mean and ``q`` quantile (seconds) of a prompt's wait in an iteration-level queue (see the module docstring):
    Poisson arrivals at ``arrival_rate`` prompts per second, each ``prompt_tokens`` long; an iteration carries up
    to ``room_tokens`` prompt tokens and takes ``idle_iteration_s`` with none, ``full_iteration_s`` with
    ``room_tokens``, linear between. The wait is what the prompt's first token comes later than if it had
    arrived at an iteration's end to an empty queue. ``(inf, inf)`` when prompts arrive faster than full
    iterations clear them. ``outside``: the variance (s^2) and third central moment (s^3) that iteration lengths
    have from outside the queue (attention-DP: the other ranks' prompts), independent of it, ``idle_iteration_s``
    being their mean with none of this queue's prompts: an arrival lands in a length-biased iteration, so a
    spread lengthens the rest of the iteration in progress."""
    lam, n, room, t0, tf = arrival_rate, prompt_tokens, room_tokens, idle_iteration_s, full_iteration_s
    v, skew = outside
    if not v >= 0:
        raise ValueError(f"outside variance must be >= 0 (s^2), got {v}")
    if not (lam >= 0 and n > 0 and room > 0 and 0 <= t0 <= tf and tf > 0):
        raise ValueError(f"need arrival_rate >= 0, prompt_tokens > 0, room_tokens > 0 and 0 <= idle_iteration_s <= "
                         f"full_iteration_s, full_iteration_s > 0; got {lam}, {n}, {room}, {t0}, {tf}")
    service = n / room * tf  # fluid: a prompt's share of budget-full iterations
    rho = lam * service
    if rho >= 1:
        return math.inf, math.inf
    c = (tf - t0) / room  # seconds per prompt token in an iteration
    a = c * n  # one prompt's own prefill seconds
    la = lam * a
    # prompts ahead: (a) batched, iteration lengths T' = T0 + a N, N ~ Poisson(lam T): the stationary moments
    m1 = t0 / (1 - la)
    m2 = (t0 ** 2 + 2 * t0 * la * m1 + a * la * m1) / (1 - la * la)
    m3 = (t0 ** 3 + 3 * t0 ** 2 * la * m1 + 3 * t0 * a * (la * m1 + la * lam * m2)
          + a * a * (3 * la * lam * m2 + la * m1)) / (1 - la ** 3)
    if v:  # plus an independent part X of mean 0: E[(T + X)^2] = E[T^2] + v, E[(T + X)^3] = E[T^3] + 3 E[T] v + skew
        m2, m3 = m2 + v, m3 + 3 * m1 * v + skew
    tau1, tau2 = (m2 / m1, m3 / m1) if m1 > 0 else (0.0, 0.0)  # the length-biased iteration an arrival lands in
    batched = tau1 / 2 * (1 + la)  # U tau + a Poisson(lam U tau)
    batched_var = tau2 / 3 * (1 + 2 * la + la * la) + a * la * tau1 / 2 - batched ** 2
    # (b) queued, M/D/1 behind the in-progress and earlier prompts plus the rest of a decode-only iteration
    # the rest of a length-biased decode-only iteration: E[T^2] / (2 E[T]), E[T^3] / (3 E[T]) its second moment
    rest, rest_var = t0 / 2, t0 * t0 / 12  # uniform over T0 when v = 0
    if v and t0 > 0:
        rest = (t0 * t0 + v) / (2 * t0)
        rest_var = (t0 ** 3 + 3 * t0 * v + skew) / (3 * t0) - rest * rest
    queued = md1_mean_wait(rho, service) + rest
    queued_var = md1_wait_variance(rho, service) + rest_var
    # the later prompts that share its last iteration: those arrived before it starts (during the wait ahead and
    # the prompt's own full chunks), in the room its last chunk leaves
    chunks = math.ceil(n / room)
    free = room - (n - (chunks - 1) * room)
    means, quantiles = [], []
    for ahead, var, until_last in ((batched, batched_var, tau1 / 2), (queued, queued_var, queued)):
        s1, s2 = _shared_room(lam * (until_last + (chunks - 1) * tf), n, free)
        means.append(ahead + c * s1)
        quantiles.append(gamma_quantile(means[-1], max(0.0, var + c * c * (s2 - s1 * s1)), q))
    return max(means), max(quantiles)  # each limit's, the larger
