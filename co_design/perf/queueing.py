"""Waiting time of an M/D/1 queue: Poisson arrivals, one server, equal service times.

A replica's prompts queue this way under Poisson arrivals (``Deployment.arrivals =
"poisson"``): they arrive at random, each needs the same prefill work (ISL tokens),
and the replica works through them in arrival order at the prompt-token rate its
iterations leave beside the decode tokens (:func:`co_design.perf.serving.predict`).

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

Units: seconds for ``service_s`` and the waits; ``rho`` is the server's busy
fraction (arrival rate x service time), dimensionless. Pure Python.
"""

from __future__ import annotations

import math

__all__ = ["md1_mean_wait", "md1_wait_quantile"]


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
