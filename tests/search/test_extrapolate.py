"""The loss-at-target-budget law (search/extrapolate.py): fit, limits and residual transfer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from search.extrapolate import LossLaw, fit_loss_law


def _points(law: LossLaw, ns, ds, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(n, d, law(n, d) + noise * rng.standard_normal()) for n, d in itertools.product(ns, ds)]


TRUE = LossLaw(E=1.2, A=40.0, alpha=0.35, B=300.0, beta=0.45, rmse=0.0, points=0)
NS = (1e4, 3e4, 1e5, 3e5)
DS = (5e4, 1.5e5, 4.5e5)


def test_the_fit_recovers_a_known_law_and_extrapolates_with_it():
    law = fit_loss_law(_points(TRUE, NS, DS))
    assert law.alpha == pytest.approx(0.35, abs=1e-9) and law.beta == pytest.approx(0.45, abs=1e-9)
    assert law.rmse < 1e-6
    # 16x the largest fitted N and 20 tokens per parameter: far outside the fitted range
    assert law(4.8e6, 9.6e7) == pytest.approx(TRUE(4.8e6, 9.6e7), abs=1e-6)


def test_the_fit_with_noise_stays_close_out_of_range():
    law = fit_loss_law(_points(TRUE, NS, DS, noise=0.005, seed=3))
    assert abs(law(1.5e6, 1.2e6) - TRUE(1.5e6, 1.2e6)) < 0.05
    assert law.rmse < 0.01


def test_transfer_keeps_the_candidates_residual():
    law = fit_loss_law(_points(TRUE, NS, DS))
    at_proxy = law(1e5, 1.5e5)
    # a shape 0.03 nats better than the law at the proxy's scale stays 0.03 better at full size
    full = law.transfer(at_proxy - 0.03, proxy_params=1e5, proxy_tokens=1.5e5, params=1.6e6, tokens=3.2e7)
    assert full == pytest.approx(law(1.6e6, 3.2e7) - 0.03)
    assert law.transfer(2.5, proxy_params=1e5, proxy_tokens=1.5e5, params=1e5, tokens=1.5e5) == pytest.approx(2.5)


def test_too_few_or_degenerate_points_are_refused():
    with pytest.raises(ValueError, match="at least 5"):
        fit_loss_law(_points(TRUE, NS[:2], DS[:2]))
    with pytest.raises(ValueError, match="2 distinct token budgets"):
        fit_loss_law(_points(TRUE, (*NS, 2e4), DS[:1]))


def test_coefficients_are_never_negative():
    # losses that rise with N: the best non-negative fit drops the N term instead of a negative A
    pts = [(n, d, 2.0 + 1e-6 * n + 50.0 / d**0.5) for n, d in itertools.product(NS, DS)]
    law = fit_loss_law(pts)
    assert law.A >= 0 and law.B >= 0
