"""The search job: ``python -m search`` (Hydra + Optuna + Lightning + W&B).

Nothing in ``co_design`` imports this package. Entry points: :func:`search.app.run`
(a composed config -> a finished study and its results) and ``python -m search``.
"""
