"""Collective times: the all-reduce algorithm switch and the per-step latency."""

import pytest

from co_design.hardware import get_gpu
from co_design.perf.comm import all_reduce_algorithm, collective_time_s, link_bytes_per_s


def _crossover_bytes(gpu, n, step_s, efficiency=1.0):
    # one-shot: step + (n-1) S / bw; two-shot: 2 step + 2 (n-1)/n S / bw; equal at
    # S* = step * bw * n / ((n-1)(n-2))
    bw = link_bytes_per_s(gpu, n, efficiency)
    return step_s * bw * n / ((n - 1) * (n - 2))


@pytest.mark.parametrize("n", [4, 8])
def test_all_reduce_goes_one_shot_below_the_crossover_and_two_shot_above(n):
    g = get_gpu("h100")
    oh = 5e-6
    step = g.collective_latency_s + oh
    s_star = _crossover_bytes(g, n, step)
    bw = link_bytes_per_s(g, n)
    for s, algo in ((0.5 * s_star, "one_shot"), (2.0 * s_star, "two_shot")):
        assert all_reduce_algorithm(s, n, g, overhead_s=oh) == algo
        expected = (step + (n - 1) * s / bw) if algo == "one_shot" else (2 * step + 2 * (n - 1) / n * s / bw)
        assert collective_time_s("all_reduce", s, n, g, overhead_s=oh) == pytest.approx(expected)
    # auto is the faster of the two, everywhere
    for s in (1e3, 1e5, s_star, 1e7, 1e9):
        one = collective_time_s("all_reduce", s, n, g, overhead_s=oh, algorithm="one_shot")
        two = collective_time_s("all_reduce", s, n, g, overhead_s=oh, algorithm="two_shot")
        assert collective_time_s("all_reduce", s, n, g, overhead_s=oh) == pytest.approx(min(one, two))


def test_a_small_all_reduce_pays_one_step_and_a_large_one_two():
    g = get_gpu("b200")
    step = g.collective_latency_s + 7e-6
    tiny = collective_time_s("all_reduce", 16e3, 8, g, overhead_s=7e-6)  # one token's hidden state
    assert step < tiny < step * 1.2
    big = 256e6
    assert collective_time_s("all_reduce", big, 8, g, overhead_s=7e-6) == pytest.approx(
        2 * step + 2 * 7 / 8 * big / link_bytes_per_s(g, 8))


def test_two_gpus_always_go_one_shot():
    # at n = 2 both algorithms move S bytes per GPU; one-shot has one step fewer
    g = get_gpu("h200")
    for s in (1e3, 1e6, 1e9):
        assert all_reduce_algorithm(s, 2, g) == "one_shot"


def test_one_shot_needs_one_nvlink_domain():
    g = get_gpu("h100")  # 8 GPUs per NVLink domain
    assert all_reduce_algorithm(1e3, 16, g) == "two_shot"
    assert all_reduce_algorithm(1e3, 8, g, span=16) == "two_shot"
    assert collective_time_s("all_reduce", 1e3, 16, g, algorithm="one_shot") == pytest.approx(
        collective_time_s("all_reduce", 1e3, 16, g, algorithm="two_shot"))
    assert all_reduce_algorithm(1e3, 8, g) == "one_shot"


def test_other_collectives_pay_one_step():
    g = get_gpu("h100")
    oh = 3e-6
    bw = link_bytes_per_s(g, 8)
    assert collective_time_s("all_gather", 1e6, 8, g, overhead_s=oh) == pytest.approx(
        g.collective_latency_s + oh + 7 / 8 * 1e6 / bw)
    assert collective_time_s("p2p", 1e6, 2, g, overhead_s=oh) == pytest.approx(g.collective_latency_s + oh + 1e6 / bw)


def test_nothing_moves_for_one_gpu_or_no_bytes_but_names_are_checked():
    g = get_gpu("h100")
    assert collective_time_s("all_reduce", 1e6, 1, g) == 0.0
    assert all_reduce_algorithm(0.0, 8, g) == "none"
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        collective_time_s("allreduce", 1e6, 1, g)
    with pytest.raises(ValueError, match="unknown all-reduce algorithm 'ring'"):
        collective_time_s("all_reduce", 1e6, 8, g, algorithm="ring")
