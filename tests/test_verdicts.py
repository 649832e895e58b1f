"""The claims' differences, their intervals and verdicts (esopt.report.verdicts)."""

import math

import pandas as pd
import pytest

from esopt.report.verdicts import contrast, t975, verdict, verdicts_table, welch_df

REF = {"sudoku": {"esopt": {5: 89.58, 15: 53.13}, "ppo": {5: 90.63, 15: 0.0}},
       "sigma_ablation": {"esopt": 53.13, "es_sigmaT0": 28.13},
       "population": {"qwen3.5-4b": {8: 2.95, 16: 22.92}}}


def evals(rows):
    """rows: (method, H*, G, [success per seed]) -> a load_evals-like frame, SE 0.02 each."""
    out = []
    for method, h, g, successes in rows:
        for seed, s in enumerate(successes):
            out.append({"method": method, "train_horizon": h, "population": g, "seed": seed, "eval_horizon": h,
                        "success": s, "success_se": 0.02})
    return pd.DataFrame(out)


def test_the_interval_is_a_t_interval_of_the_seed_and_binomial_variance():
    a = evals([("esopt", 15, 16, [0.5, 0.6, 0.7])])
    b = evals([("ppo", 15, None, [0.2, 0.3, 0.4])])
    c = contrast([a], [b])
    var = 2 * (0.01 + 0.02 ** 2) / 3  # each arm: seed variance 0.01, binomial 0.0004, over 3 seeds
    # Welch-Satterthwaite: only the seed variances (2 df each) are estimated from few samples;
    # the binomial terms have no episodes recorded here, so they count as exactly known
    df = var ** 2 / (2 * (0.01 / 3) ** 2 / 2)
    assert 4 < df < 5
    assert c["difference"] == pytest.approx(0.3)
    assert c["ci_high"] - c["difference"] == pytest.approx(t975(df) * math.sqrt(var))
    assert t975(df) == t975(4)  # a fractional df rounds down: the wider interval
    assert c["seeds"] == "3/3"
    one = contrast([a.iloc[:1]], [b])
    assert math.isnan(one["ci_low"]) and one["seeds"] == "1/3"  # one seed: no seed variance, no interval


def test_t_quantiles_beyond_the_table_follow_the_exact_ones():
    # scipy.stats.t.ppf(0.975, df), computed once (scipy is not a dependency)
    for df, exact in ((31, 2.039513446), (60, 2.000297822), (312, 1.967596497)):
        assert t975(df) == pytest.approx(exact, abs=1e-5)
    assert t975(30) == 2.042 and t975(1e9) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        t975(0.5)


def test_welch_df_pools_equal_arms_and_follows_the_estimated_term():
    # two equal arms of n seeds with only a seed variance each: the pooled t's n_a + n_b - 2
    assert welch_df([(0.01 / 3, 2), (0.01 / 3, 2)]) == pytest.approx(4)
    # one arm's spread dominates: close to that arm's n - 1
    assert welch_df([(1.0, 2), (1e-4, 2)]) == pytest.approx(2, rel=1e-3)
    # evaluation noise (511 df) dominates a small seed spread: far more than n - 1
    assert welch_df([(5e-5, 2), (5e-4, 511)]) > 100
    assert welch_df([(0.0, 2), (0.01, math.inf)]) == math.inf  # nothing estimated: the normal's
    assert welch_df([(1.0, 2), (1e-17, 2)]) >= 2  # never below its fewest-df term, rounding or not
    with pytest.raises(ValueError, match="at least 1 degree"):
        welch_df([(0.01, 0)])


def test_a_contrast_counts_each_evaluations_episodes():
    a = evals([("esopt", 15, 16, [0.50, 0.52, 0.54])]).assign(episodes=512)
    b = evals([("ppo", 15, None, [0.40, 0.40, 0.40])]).assign(episodes=[512, float("nan"), 256])
    c = contrast([a], [b])
    seed_a, binom = 0.0004 / 3, 0.02 ** 2 / 3  # arm b has no seed spread; its fewest episodes: 256
    df = (seed_a + 2 * binom) ** 2 / (seed_a ** 2 / 2 + binom ** 2 / 511 + binom ** 2 / 255)  # by hand: about 18
    assert 15 < df < 20
    assert c["ci_high"] - c["difference"] == pytest.approx(t975(df) * math.sqrt(seed_a + 2 * binom))


def test_verdicts_follow_the_interval_and_the_papers_effect():
    assert verdict(0.01, 0.2, 0.25) == "reproduced"
    assert verdict(-0.05, 0.04, 0.25) == "not reproduced"  # excludes an effect the paper's size
    assert verdict(-0.05, 0.30, 0.25) == "undecided"
    assert verdict(-0.2, -0.01, None) == "not reproduced"
    assert verdict(-0.2, 0.01, None) == "undecided"
    assert verdict(float("nan"), float("nan"), 0.25) == "undecided"


def test_the_table_tests_each_claim_against_the_papers_numbers():
    df = evals([
        ("esopt", 5, 16, [0.80, 0.82, 0.84]), ("esopt", 15, 16, [0.40, 0.42, 0.44]),
        ("ppo", 5, None, [0.90, 0.91, 0.92]), ("ppo", 15, None, [0.10, 0.11, 0.12]),
        ("es_sigmaT0", 15, 16, [0.40, 0.43, 0.44]),
        ("esopt", 15, 4, [0.41, 0.42, 0.43]),
    ])
    tab = verdicts_table(df, horizons=[5, 10, 15], population=16, ablation_horizon=15,
                         study={"horizon": 15, "populations": [4, 16]}, reference=REF).set_index("comparison")
    assert list(tab.index) == ["esopt - ppo", "(esopt - ppo) growth", "esopt - es_sigmaT0", "esopt G16 - G4"]
    lead, growth = tab.loc["esopt - ppo"], tab.loc["(esopt - ppo) growth"]
    assert lead.difference == pytest.approx(0.31) and lead.verdict == "reproduced"
    assert lead.paper_difference == pytest.approx(0.5313)
    assert growth.difference == pytest.approx(0.31 + 0.09) and growth.verdict == "reproduced"
    assert growth.paper_difference == pytest.approx(0.5313 - (0.8958 - 0.9063))
    sig = tab.loc["esopt - es_sigmaT0"]
    assert sig.difference == pytest.approx(-0.0033, abs=1e-4) and sig.verdict == "not reproduced"
    assert sig.paper_difference == pytest.approx(0.25)
    pop = tab.loc["esopt G16 - G4"]
    assert pop.paper_difference == pytest.approx(0.1997) and pop.verdict == "not reproduced"
