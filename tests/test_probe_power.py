"""Power of the probe's verdict under a stated alternative (real/verdict.py ``by_power``): exact for one head,
calibrated under the global null, and what it says about K."""

import numpy as np
import pytest
from scipy import stats

from attnsvm.errors import ValidationError
from attnsvm.real.verdict import LEVEL, by_power


@pytest.mark.parametrize("draws,effect", [(4, 3.0), (8, 2.5), (8, 4.0)])
def test_one_head_power_is_the_noncentral_t_tail(draws, effect):
    """With one head (BY = the plain level), p_upper <= level iff ``(effect - mean) / (sd sqrt(1 + 1/K))`` is at
    least t's (1 - level) quantile; ``(effect - mean) / sd = T / sqrt(K)`` with T noncentral t (K - 1 degrees of
    freedom, noncentrality ``effect sqrt(K)``), so the power is ``P(T >= sqrt(K + 1) t_{1-level, K-1})``."""
    exact = stats.nct.sf(np.sqrt(draws + 1) * stats.t.isf(LEVEL, draws - 1), draws - 1, effect * np.sqrt(draws))
    got = by_power(draws, effect, heads=1, standing_out=1, reps=5000, seed=1)["power"]
    assert abs(got - exact) <= 4 * np.sqrt(exact * (1 - exact) / 5000) + 1e-9


def test_no_head_standing_out_keeps_the_false_discovery_rate():
    """Under the global null every call is false: its rate (the FDR) stays at or below the level."""
    r = by_power(8, 0.0, standing_out=0, reps=1000)
    assert np.isnan(r["power"]) and r["fdr"] <= LEVEL


def test_power_grows_with_the_draws_and_the_effect():
    """At 72 heads with 7 standing out: more null draws (fewer t degrees of freedom lost) and larger effects call more
    of them; at 6 null sds K = 8 calls most, K = 6 fewer than half."""
    p = {k: by_power(k, 6.0, reps=400)["power"] for k in (5, 6, 8)}
    assert p[5] < p[6] < p[8] and p[8] > 0.6 and p[6] < 0.45
    assert by_power(8, 4.0, reps=400)["power"] < p[8] < by_power(8, 8.0, reps=400)["power"]
    with pytest.raises(ValidationError, match="draws"):
        by_power(2, 6.0)
    with pytest.raises(ValidationError, match="standing_out"):
        by_power(8, 6.0, heads=3, standing_out=4)
