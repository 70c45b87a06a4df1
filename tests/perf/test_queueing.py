"""M/D/1 waits against a simulated queue (Lindley's recursion) and, in the heavy-load tail, Erlang's exact
distribution."""

import math
import random

import mpmath  # sympy's dependency, so torch's
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from co_design.perf.queueing import (_stationary, busy_ranks, gamma_quantile, grouped_counts,
                                    iteration_queue_wait, md1_mean_wait, md1_wait_quantile, md1_wait_variance,
                                    poisson_quantile, prompt_counts)


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


@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_md1_variance_matches_a_simulated_queue(rho):
    s = 0.05
    waits = simulated_waits(rho, s, 200_000, seed=2)
    mean = sum(waits) / len(waits)
    var = sum((w - mean) ** 2 for w in waits) / len(waits)
    assert md1_wait_variance(rho, s) == pytest.approx(var, rel=0.1)  # observed within 3 %
    assert md1_wait_variance(1.0, s) == math.inf


@pytest.mark.parametrize("k", [0.05, 0.7, 1.0, 3.0, 40.0, 5000.0])
@pytest.mark.parametrize("q", [0.01, 0.5, 0.99, 0.9999])
def test_gamma_quantile_has_the_exact_probability(k, q):
    scale = 0.003  # seconds
    t = gamma_quantile(k * scale, k * scale * scale, q)
    with mpmath.workdps(40):
        assert float(mpmath.gammainc(k, 0, t / scale, regularized=True)) == pytest.approx(q, abs=1e-10)


def test_gamma_quantile_edges():
    assert gamma_quantile(0.2, 0.0, 0.99) == 0.2 and gamma_quantile(0.0, 0.0, 0.99) == 0.0
    assert gamma_quantile(math.inf, 1.0, 0.99) == math.inf
    with pytest.raises(ValueError, match=r"mean and variance must be >= 0, got -1"):
        gamma_quantile(-1.0, 1.0, 0.5)
    with pytest.raises(ValueError, match=r"q \(quantile\) must be in \(0, 1\)"):
        gamma_quantile(1.0, 1.0, 1.0)


def test_iteration_queue_wait_limits():
    # a lone arrival (no others): the rest of the decode-only iteration in progress, uniform over it; the
    # gamma law of that mean and variance (shape 3) puts the p99 at 1.41x the uniform's 19.8 ms
    mean, p99 = iteration_queue_wait(1e-9, 512, 8000, 0.02, 0.5)
    assert mean == pytest.approx(0.01, rel=1e-6)
    assert p99 == pytest.approx(0.0198 * 1.415, rel=0.01)
    # more load waits longer, at the mean and p99
    lighter, heavier = (iteration_queue_wait(rate, 512, 8000, 0.02, 0.5) for rate in (5.0, 20.0))
    assert heavier[0] > lighter[0] and heavier[1] > lighter[1] > lighter[0]
    # the parts: at least the M/D/1 queue ahead plus half an idle iteration
    rate, service = 20.0, 512 / 8000 * 0.5
    assert heavier[0] > md1_mean_wait(rate * service, service) + 0.01
    # prompts that outrun budget-full iterations: no steady state
    assert iteration_queue_wait(8000 / 512 / 0.5, 512, 8000, 0.02, 0.5) == (math.inf, math.inf)
    with pytest.raises(ValueError, match=r"0 <= idle_iteration_s <= full_iteration_s"):
        iteration_queue_wait(1.0, 512, 8000, 0.6, 0.5)


@st.composite
def iteration_queues(draw):
    """(room tokens, prompt tokens, decode-only s, budget-full s, busy share of budget-full iterations): a
    budget-full iteration 1.5-100x a decode-only one, as serving steps are (the MLPerf rows at their load: 10-32x)."""
    room = draw(st.integers(256, 32768))
    prompt = draw(st.integers(16, 8 * room))
    idle = draw(st.floats(1e-3, 0.2))
    full = idle * draw(st.floats(1.5, 100.0))
    return room, prompt, idle, full, draw(st.floats(0.01, 0.97))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(iteration_queues(), st.floats(1.01, 1.5))
def test_iteration_queue_wait_properties(queue, more):
    room, prompt, idle, full, busy = queue
    rate = busy * room / (prompt * full)
    mean, p99 = iteration_queue_wait(rate, prompt, room, idle, full)
    service = prompt / room * full
    # at least the M/D/1 queue ahead and the rest of a decode-only iteration
    assert math.isfinite(mean) and mean >= md1_mean_wait(busy, service) + idle / 2 - 1e-12
    # more load never waits less. Below 1 % busy (not drawn) a prompt of several chunks rarely shares its last
    # iteration, and the gamma law of that rare share can put the p99 a few per cent lower at more load (6 %
    # at worst in 125k random draws)
    if busy * more < 1:
        heavier = iteration_queue_wait(rate * more, prompt, room, idle, full)
        assert heavier[0] >= mean * (1 - 1e-9) and heavier[1] >= p99 * (1 - 1e-9)


def exact_poisson_quantile(mean: float, q: float) -> int:
    """Least k with P(N <= k) >= q, P(N <= k) = Q(k + 1, mean) (regularized upper incomplete gamma, mpmath), by
    bisection over k."""
    with mpmath.workdps(40):
        lo, hi = -1, int(mean + 20 * math.sqrt(mean) + 20)  # P(N <= lo) < q <= P(N <= hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if float(mpmath.gammainc(mid + 1, mean, mpmath.inf, regularized=True)) < q:
                lo = mid
            else:
                hi = mid
        return hi


@pytest.mark.parametrize("mean", [0.0, 0.3, 1.0, 10.0, 95.0, 700.0])
@pytest.mark.parametrize("q", [0.5, 0.99])
def test_poisson_quantile_is_exact_up_to_a_mean_of_700(mean, q):
    assert poisson_quantile(mean, q) == exact_poisson_quantile(mean, q)


def test_poisson_quantile_beyond_700_is_the_gamma_law_s_within_a_count():
    for mean in (701.0, 5000.0, 1e6):
        assert abs(poisson_quantile(mean, 0.99) - exact_poisson_quantile(mean, 0.99)) <= 1.0
    with pytest.raises(ValueError, match=r"mean must be >= 0, got -1"):
        poisson_quantile(-1.0, 0.5)


def test_prompt_counts_are_whole_poisson_counts_grouped_past_the_row_limit():
    # few counts: each its own row, with its Poisson share
    rows = prompt_counts(0.5, 4, 3, parts=8)
    assert [n for _, n, _ in rows][:3] == [0, 1, 2] and len(rows) <= 8
    for share, n, _ in rows[:3]:
        assert share == pytest.approx(math.exp(-0.5) * 0.5 ** n / math.factorial(int(n)), rel=1e-9)
    assert [b for _, _, b in rows[:3]] == [0.0, 1.0, 1.0]  # routed to the rank with the fewest: 2 on 2 ranks
    # past the ranks, ceil(n / ranks) on the busiest, at most the room's `fits`; a group the mean over its counts
    one = prompt_counts(2.0, 1, 3, parts=100)  # every count its own row
    assert [b for _, _, b in one[:6]] == [0.0, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert prompt_counts(9.0, 4, 8, parts=100)[9][1:] == (9.0, 3.0)
    grouped = prompt_counts(9.0, 4, 8, parts=3)
    assert 1.0 < grouped[1][2] < grouped[2][2] < 8.0
    # many counts: at most `parts` rows; the shares sum to 1 and the mean count is kept
    for mean in (0.01, 3.0, 40.0, 1000.0):
        rows = prompt_counts(mean, 8, 6, parts=8)
        assert len(rows) <= 8
        assert sum(s for s, _, _ in rows) == pytest.approx(1.0, rel=1e-9)
        assert sum(s * n for s, n, _ in rows) == pytest.approx(mean, rel=1e-9)
        assert all(0 <= busiest <= min(6, n) * (1 + 1e-12) for _, n, busiest in rows)
    assert prompt_counts(0.0, 8, 6) == [(1.0, 0.0, 0.0)]
    assert grouped_counts([1.0, 3.0]) == [(0.25, 0.0, 0.0), (0.75, 1.0, 1.0)]
    assert grouped_counts([0.0, 1.0, 1.0, 1.0, 1.0], parts=2, value=lambda n: n * n) == [(1.0, 2.5, 7.5)]
    with pytest.raises(ValueError, match="ranks=0"):
        prompt_counts(1.0, 0, 6)


def test_busy_ranks_keeps_the_work_and_without_feedback_is_a_capped_poisson():
    # every iteration as long as any other: arrivals do not depend on the state, and prompts of one iteration
    # each (stay 0) make the busy count Poisson(m), its tail folded into the last state
    pi, lam = busy_ranks(8, 0.05, 0.05, 0.05, 1.5, 1.0)
    pois = [math.exp(-1.5) * 1.5 ** k / math.factorial(k) for k in range(8)]
    assert pi[:8] == pytest.approx(pois, abs=1e-9) and pi[8] == pytest.approx(1 - sum(pois), abs=1e-9)
    assert lam == pytest.approx(1.5 / 0.05, rel=1e-6)
    # the work is kept: E[B] = m d (prompts per iteration x iterations each), away from the cap
    for m, d in ((0.3, 1.0), (1.0, 1.5), (0.5, 3.0)):
        pi, lam = busy_ranks(16, 0.03, 0.25, 1.2, m, d)
        assert sum(b * p for b, p in enumerate(pi)) == pytest.approx(m * d, rel=1e-3)
        t = [0.03] + [0.25 + (b - 1) * (1.2 - 0.25) / 15 for b in range(1, 17)]
        assert lam * sum(p * x for p, x in zip(pi, t)) == pytest.approx(m, rel=1e-6)  # prompts per iteration


def test_busy_ranks_cluster_when_busy_iterations_are_long():
    # long busy iterations let more prompts in at once: at the same mean the ranks are all idle more often, and
    # busy ones meet more busy others, than independent ranks would
    pi, _ = busy_ranks(8, 0.03, 0.3, 0.9, 0.8, 1.0)
    flat, _ = busy_ranks(8, 0.3, 0.3, 0.3, 0.8, 1.0)
    assert pi[0] > flat[0] + 0.05
    mean = sum(b * p for b, p in enumerate(pi))
    mean_flat = sum(b * p for b, p in enumerate(flat))
    assert mean == pytest.approx(mean_flat, rel=1e-3)
    assert sum(b * b * p for b, p in enumerate(pi)) > sum(b * b * p for b, p in enumerate(flat)) * 1.2


def test_stationary_distribution_against_closed_forms_and_by_balance():
    # two states: pi = (b, a) / (a + b); a birth-death chain: detailed balance pi_k p_up = pi_k+1 p_down
    assert _stationary([[0.7, 0.3], [0.1, 0.9]]) == pytest.approx([0.25, 0.75], rel=1e-14)
    up, down = 0.3, 0.5
    rows = [[1 - up, up, 0, 0], [down, 1 - up - down, up, 0], [0, down, 1 - up - down, up], [0, 0, down, 1 - down]]
    ratio = [(up / down) ** k for k in range(4)]
    assert _stationary(rows) == pytest.approx([r / sum(ratio) for r in ratio], rel=1e-13)
    rng = random.Random(5)
    for n in range(2, 14):
        rows = [[rng.random() ** 3 for _ in range(n)] for _ in range(n)]
        rows = [[x / sum(r) for x in r] for r in rows]
        pi = _stationary(rows)
        assert [sum(pi[i] * rows[i][j] for i in range(n)) for j in range(n)] == pytest.approx(pi, abs=1e-14)
    # a state the chain never leaves downwards: what lies below it is transient
    assert _stationary([[0.2, 0.8, 0.0], [0.1, 0.0, 0.9], [0.0, 0.0, 1.0]]) == [0.0, 0.0, 1.0]


def test_busy_ranks_with_more_arrivals_than_any_iteration_drains():
    # 2000 prompts an iteration: the chance of an iteration with none underflows, every rank stays busy, and the
    # rate still keeps the work (lambda T(all) = m)
    pi, lam = busy_ranks(8, 0.01, 0.02, 0.1, 2000.0, 1.5)
    assert pi == [0.0] * 8 + [1.0]
    assert lam == pytest.approx(2000.0 / 0.1, rel=1e-12)


def test_iteration_queue_wait_with_iterations_spread_from_outside():
    # iterations 0.05 s on average without this queue's prompts, from other ranks' prompts: 30 % of them
    # `gap` seconds longer than the rest, a two-point spread (variance, third central moment)
    base = iteration_queue_wait(2.0, 4000, 8000, 0.05, 0.4)
    assert iteration_queue_wait(2.0, 4000, 8000, 0.05, 0.4, 0.99, (0.0, 0.0)) == base  # none: the same figures
    waits = [base]
    for gap in (0.01, 0.03, 0.1):
        p = 0.3
        spread = (p * (1 - p) * gap ** 2, p * (1 - p) * (1 - 2 * p) * gap ** 3)
        waits.append(iteration_queue_wait(2.0, 4000, 8000, 0.05, 0.4, 0.99, spread))
    # the iteration in progress is longer when iterations vary: mean and p99 rise with the spread
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(waits, waits[1:]))
    with pytest.raises(ValueError, match="outside variance"):
        iteration_queue_wait(2.0, 4000, 8000, 0.05, 0.4, 0.99, (-1e-3, 0.0))
    with pytest.raises(ValueError, match="idle_s"):
        busy_ranks(8, 0.0, 0.1, 0.2, 1.0, 1.0)

