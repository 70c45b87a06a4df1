"""M/D/1 waits against a simulated queue (Lindley's recursion) and, in the heavy-load tail, Erlang's exact
distribution."""

import math
import random

import mpmath  # sympy's dependency, so torch's
import pytest

from co_design.perf.queueing import md1_mean_wait, md1_wait_quantile


def simulated_waits(rho: float, s: float, n: int, seed: int) -> list[float]:
    """Waits of n Poisson arrivals at one server of service time s: W' = max(0, W + s - A), A ~ Exp(rho / s)."""
    rng, w, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(w)
        w = max(0.0, w + s - rng.expovariate(rho / s))
    return out


@pytest.mark.parametrize("rho", [0.1, 0.3, 0.6])
def test_mean_and_quantiles_match_a_simulated_queue(rho):
    s = 0.05  # seconds of prefill per prompt
    waits = simulated_waits(rho, s, 200_000, seed=1)
    # 200k arrivals: the simulated mean is within ~1 % (busy periods of ~s / (1 - rho) correlate neighbours)
    assert md1_mean_wait(rho, s) == pytest.approx(sum(waits) / len(waits), rel=0.04)
    for q in (0.9, 0.99):
        t = md1_wait_quantile(rho, s, q)
        beyond = sum(w > t for w in waits) / len(waits)
        if rho <= 1 - q:  # enough arrivals find the server idle: the quantile is no wait
            assert t == 0.0 and beyond <= 1 - q
        else:  # at least 2000 of the 200k wait longer at p99: the fraction is good to ~10 %
            assert beyond == pytest.approx(1 - q, rel=0.15)


def erlang_cdf(rho: float, s: float, t: float) -> float:
    """P(W <= t) of M/D/1, Erlang's exact sum, its alternating terms (up to exp(lam t)) summed with 30 digits to
    spare."""
    terms = int(t // s) + 1
    with mpmath.workdps(30 + int(rho / s * t)):
        lam, t = mpmath.mpf(rho) / s, mpmath.mpf(t)
        return float((1 - mpmath.mpf(rho)) * mpmath.fsum((lam * (k * s - t)) ** k / mpmath.factorial(k)
                                                          * mpmath.exp(-lam * (k * s - t)) for k in range(terms)))


@pytest.mark.parametrize("rho,q", [(0.2, 0.99), (0.5, 0.9), (0.5, 0.99), (0.9, 0.99), (0.93, 0.99), (0.96, 0.9),
                                   (0.99, 0.99)])
def test_quantiles_have_the_exact_probability(rho, q):
    # below lam t = 20 the product inverts the exact sum; above, the Cramer-Lundberg asymptote answers
    t = md1_wait_quantile(rho, 1.0, q)
    assert erlang_cdf(rho, 1.0, t) == pytest.approx(q, abs=2e-5)


def test_edges_and_bad_input():
    assert md1_wait_quantile(0.0, 1.0, 0.99) == 0.0 and md1_mean_wait(0.0, 1.0) == 0.0
    assert md1_wait_quantile(0.005, 1.0, 0.99) == 0.0  # 99.5 % of arrivals find the server idle
    assert md1_wait_quantile(1.0, 1.0, 0.99) == math.inf and md1_mean_wait(1.2, 1.0) == math.inf
    assert md1_wait_quantile(0.5, 1.0, 0.99) > md1_wait_quantile(0.5, 1.0, 0.9) > md1_mean_wait(0.5, 1.0)
    with pytest.raises(ValueError, match=r"q \(quantile\) must be in \(0, 1\), e.g. 0.99, got 99"):
        md1_wait_quantile(0.5, 1.0, 99)
    with pytest.raises(ValueError, match="service_s must be > 0 seconds, got 0"):
        md1_mean_wait(0.5, 0)
    with pytest.raises(ValueError, match=r"rho \(utilization\) must be >= 0, got -0.1"):
        md1_mean_wait(-0.1, 1.0)
