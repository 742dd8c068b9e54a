"""Reference values for crates/stats/tests/it, computed independently with SciPy.

Run: python3 -m venv /tmp/statsvenv && /tmp/statsvenv/bin/pip install scipy numpy
     /tmp/statsvenv/bin/python tools/stats_reference.py
Produced with scipy 1.17.1 and numpy 2.4.6. Each block prints the exact call it makes;
the Rust tests quote these calls next to the constants they pasted from the output.
"""
from fractions import Fraction

import numpy as np
from scipy import stats


def show(label, value):
    print(f"{label} = {float(value)!r}")


def z_test(x_c, n_c, x_t, n_t, level=0.95):
    """Two-proportion z-test (pooled SE) and delta-method interval for p_t/p_c - 1."""
    p_c, p_t = x_c / n_c, x_t / n_t
    pooled = (x_c + x_t) / (n_c + n_t)
    se = np.sqrt(pooled * (1 - pooled) * (1 / n_c + 1 / n_t))
    z = (p_t - p_c) / se
    p = 2 * stats.norm.sf(abs(z))
    r = p_t / p_c
    var_r = r**2 * ((p_t * (1 - p_t) / n_t) / p_t**2 + (p_c * (1 - p_c) / n_c) / p_c**2)
    crit = stats.norm.ppf(1 - (1 - level) / 2)
    half = crit * np.sqrt(var_r)
    print(f"# z-test {x_c}/{n_c} vs {x_t}/{n_t} at {level}: "
          f"z = (p_t-p_c)/sqrt(pooled(1-pooled)(1/n_c+1/n_t)), "
          f"p = 2*scipy.stats.norm.sf(abs(z)), crit = scipy.stats.norm.ppf({1 - (1 - level) / 2})")
    show("estimate", r - 1)
    show("ci_low", r - half - 1)
    show("ci_high", r + half - 1)
    show("statistic", z)
    show("p_value", p)


def z_only(x_c, n_c, x_t, n_t):
    """The z statistic and p-value alone, for the degenerate rates with no relative lift."""
    p_c, p_t = x_c / n_c, x_t / n_t
    pooled = (x_c + x_t) / (n_c + n_t)
    z = (p_t - p_c) / np.sqrt(pooled * (1 - pooled) * (1 / n_c + 1 / n_t))
    print(f"# z-test {x_c}/{n_c} vs {x_t}/{n_t}: p = 2*scipy.stats.norm.sf(abs(z))")
    show("statistic", z)
    show("p_value", 2 * stats.norm.sf(abs(z)))


def welch_from_stats(m_c, var_c, n_c, m_t, var_t, n_t, level=0.95):
    res = stats.ttest_ind_from_stats(m_t, np.sqrt(var_t), n_t, m_c, np.sqrt(var_c), n_c,
                                     equal_var=False)
    v_c, v_t = var_c / n_c, var_t / n_t
    df = (v_c + v_t) ** 2 / (v_t**2 / (n_t - 1) + v_c**2 / (n_c - 1))
    r = m_t / m_c
    var_r = r**2 * (v_t / m_t**2 + v_c / m_c**2)
    crit = stats.t.ppf(1 - (1 - level) / 2, df)
    half = crit * np.sqrt(var_r)
    print(f"# scipy.stats.ttest_ind_from_stats({m_t}, sqrt({var_t}), {n_t}, {m_c}, sqrt({var_c}), "
          f"{n_c}, equal_var=False); crit = scipy.stats.t.ppf({1 - (1 - level) / 2}, df)")
    show("estimate", r - 1)
    show("ci_low", r - half - 1)
    show("ci_high", r + half - 1)
    show("statistic", res.statistic)
    show("df", df)
    show("p_value", res.pvalue)


def welch_from_values(c, t, level=0.95):
    res = stats.ttest_ind(t, c, equal_var=False)
    v_c, v_t = np.var(c, ddof=1) / len(c), np.var(t, ddof=1) / len(t)
    m_c, m_t = np.mean(c), np.mean(t)
    df = res.df
    r = m_t / m_c
    var_r = r**2 * (v_t / m_t**2 + v_c / m_c**2)
    crit = stats.t.ppf(1 - (1 - level) / 2, df)
    half = crit * np.sqrt(var_r)
    print(f"# scipy.stats.ttest_ind({t}, {c}, equal_var=False); "
          f"crit = scipy.stats.t.ppf({1 - (1 - level) / 2}, res.df)")
    show("estimate", r - 1)
    show("ci_low", r - half - 1)
    show("ci_high", r + half - 1)
    show("statistic", res.statistic)
    show("df", df)
    show("p_value", res.pvalue)


def chisquare(observed, weights):
    observed = np.array(observed, dtype=float)
    w = np.array(weights, dtype=float)
    expected = observed.sum() * w / w.sum()
    res = stats.chisquare(observed, f_exp=expected)
    print(f"# scipy.stats.chisquare({[int(o) for o in observed]}, "
          f"f_exp=sum(obs)*w/sum(w)) with w = {weights}")
    show("chi_square", res.statistic)
    show("p_value", res.pvalue)


print("## proportions")
z_test(100, 1000, 120, 1000)
z_test(2000, 20000, 2150, 20000)
z_test(4823, 50123, 5034, 49877)
z_test(4823, 50123, 5034, 49877, level=0.90)
z_test(31, 412, 18, 397, level=0.99)
z_only(0, 100, 5, 100)
z_only(0, 400, 20, 400)
z_only(10, 100, 0, 100)

print("## welch")
welch_from_values([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0])
welch_from_values([19.1, 22.4, 18.7, 25.0, 21.3, 20.8, 23.9],
                  [24.2, 19.9, 27.5, 26.1, 22.8, 30.4, 25.0, 23.3, 28.7])
welch_from_stats(12.5, 40.0, 1200, 13.1, 52.0, 950)
welch_from_stats(3.0, 25.0, 500_000, 3.02, 26.0, 500_000)
welch_from_stats(0.8, 4.0, 30, 1.1, 9.0, 12, level=0.90)
print("# scipy.stats.ttest_ind([1, 2, 3], [-1, 0, 1], equal_var=False), control mean 0")
show("p_value", stats.ttest_ind([1, 2, 3], [-1, 0, 1], equal_var=False).pvalue)

print("## quantiles")
for level in (0.90, 0.95, 0.99):
    q = 1 - (1 - level) / 2
    print(f"# scipy.stats.norm.ppf({q})")
    show("z", stats.norm.ppf(q))
for df in (1.0, 2.5, 5.882352941176471, 30.0, 1000.0, 1e6):
    print(f"# scipy.stats.t.ppf(0.975, {df}) and 2*scipy.stats.t.sf(2.0, {df})")
    show("t", stats.t.ppf(0.975, df))
    show("p", 2 * stats.t.sf(2.0, df))

for z in (1.0, 2.0, 5.0):
    print(f"# 2*scipy.stats.norm.sf({z})")
    show("p", 2 * stats.norm.sf(z))
for x, df in ((4.0, 1), (2.0, 2), (30.0, 10)):
    print(f"# scipy.stats.chi2.sf({x}, {df})")
    show("p", stats.chi2.sf(x, df))

print("## srm")
chisquare([60, 40], [1, 1])
chisquare([10_000, 10_300], [0.5, 0.5])
chisquare([3300, 3400, 3300], [1, 1, 1])
chisquare([2010, 2950, 5100], [0.2, 0.3, 0.5])
chisquare([50_000, 51_000], [1, 1])
chisquare([9_000, 1_150], [0.9, 0.1])
print("# 2*scipy.stats.norm.sf(2): chi-square 4 with one df is |Z| >= 2")
show("p_value", 2 * stats.norm.sf(2))

print("## moments")
values = [1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16]
print(f"# numpy.mean / numpy.var(ddof=1) of {values}")
show("mean", np.mean(values))
show("variance", np.var(values, ddof=1))
values = [0.0, 0.0, 3.5, 0.0, 12.25, 1.0, 0.0, 7.75]
print(f"# numpy.mean / numpy.var(ddof=1) of {values}")
show("mean", np.mean(values))
show("variance", np.var(values, ddof=1))

print("## predicted naive lift, exact rational arithmetic")
for lift, dt, dc in ((0, "0.10", "0.02"), ("0.05", "0.02", "0.10"), ("-0.5", "0", "1")):
    value = (1 + Fraction(lift)) * (1 + Fraction(dt)) / (1 + Fraction(dc)) - 1
    print(f"# (1+{lift})(1+{dt})/(1+{dc}) - 1 = {value}")
    show("predicted", value)
