"""The search-efficiency benchmark runs the job's own trial loop for as many trials as it asks for."""

import search_efficiency as se


def test_a_study_runs_the_jobs_objective_with_its_own_trial_count(monkeypatch):
    # the job prunes every trial started once its n_trials are held (parallel workers: "surplus", nothing
    # evaluated); a benchmark study longer than the job's default 14 must raise that count to its own, or its
    # curve flattens at trial 14 with the rest counted as infeasible
    import search.objective

    seen = []
    real = search.objective.Objective

    def recording(cfg, **kw):
        seen.append(cfg.n_trials)
        return real(cfg, **kw)

    monkeypatch.setattr(search.objective, "Objective", recording)
    problem = se.build_problem(se.LossEstimate(20.0, None), ["space=dense_tiny"])
    n = problem.cfg.n_trials + 6
    run = se.run_study(problem, se.parse_samplers("random")[0], 0, n)
    assert seen == [n]
    assert run["counted"] == n or run["exhausted"]
