"""From proxy losses to the full-size candidate's loss at a target token budget.

A proxy is narrower than its candidate and trains on far fewer tokens than the candidate would
get. Its loss ranks shapes at the proxy's scale; what a deployment wants is the candidate's loss
after the training it will actually get. This module fits the Chinchilla form (Hoffmann et al.
2022, arXiv 2203.15556, eq. 2)

    L(N, D) = E + A / N**alpha + B / D**beta

to proxy runs of one study (``N``: non-embedding parameters of the proxy, ``D``: training tokens;
runs at several budgets, e.g. the rungs of successive halving, are what make ``B`` and ``beta``
identifiable) and carries each candidate's own residual -- how much better or worse its shape did
than the law at the proxy's scale -- to the full size:

    L_hat(candidate) = L_proxy + L(N_full, D_target) - L(N_proxy, D_proxy)

The fit is a grid over (alpha, beta) with bounded least squares for (E free, A, B >= 0) at each
point (scipy's ``lsq_linear``); no values are set by hand. The default target budget is compute-optimal: 20 tokens per
parameter (Hoffmann et al. 2022, Table 3).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["LossLaw", "fit_loss_law", "CHINCHILLA_TOKENS_PER_PARAM"]

CHINCHILLA_TOKENS_PER_PARAM = 20.0
_EXPONENTS = np.round(np.arange(0.05, 1.0001, 0.025), 4)


@dataclass(frozen=True)
class LossLaw:
    """``L(N, D) = E + A / N**alpha + B / D**beta`` in nats/token (N parameters, D tokens); ``rmse``
    of the fit (nats/token) and ``points`` fitted."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    rmse: float
    points: int

    def __call__(self, n_params: float, tokens: float) -> float:
        return float(self.E + self.A / n_params**self.alpha + self.B / tokens**self.beta)

    def transfer(self, loss: float, *, proxy_params: float, proxy_tokens: float, params: float, tokens: float) -> float:
        """A proxy's ``loss`` carried to ``params`` parameters trained on ``tokens`` tokens."""
        return float(loss + self(params, tokens) - self(proxy_params, proxy_tokens))


def _bounded_lstsq(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares ``X @ c ~ y`` with ``c[1:] >= 0`` (E free), by scipy's bounded solver."""
    from scipy.optimize import lsq_linear

    res = lsq_linear(X, y, bounds=([-np.inf, 0.0, 0.0], [np.inf, np.inf, np.inf]))
    return res.x, float(np.sum((X @ res.x - y) ** 2))


def fit_loss_law(points: Sequence[tuple[float, float, float]]) -> LossLaw:
    """Fit ``L(N, D)`` to ``(N, D, loss)`` points (at least 5, with at least 2 distinct N and 2
    distinct D); raises ValueError otherwise."""
    arr = np.asarray(points, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != 3 or len(arr) < 5:
        raise ValueError(f"need at least 5 (params, tokens, loss) points, got {len(arr)}")
    if len(np.unique(arr[:, 0])) < 2 or len(np.unique(arr[:, 1])) < 2:
        raise ValueError("need at least 2 distinct parameter counts and 2 distinct token budgets to fit L(N, D)")
    n, d, y = arr[:, 0], arr[:, 1], arr[:, 2]
    best: tuple[float, float, float, np.ndarray] | None = None
    for alpha, beta in itertools.product(_EXPONENTS, _EXPONENTS):
        X = np.stack([np.ones_like(n), n**-alpha, d**-beta], axis=1)
        c, sse = _bounded_lstsq(X, y)
        if best is None or sse < best[0]:
            best = (sse, float(alpha), float(beta), c)
    assert best is not None
    sse, alpha, beta, c = best
    return LossLaw(E=float(c[0]), A=float(c[1]), alpha=alpha, B=float(c[2]), beta=beta,
                   rmse=float(np.sqrt(sse / len(y))), points=len(y))
