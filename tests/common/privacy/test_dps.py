"""(beta, eps, delta)-DPS accounting of k-AnonToRdt (common/privacy/dps.py, `modelshare privacy dps`).

The paper's Table 5 is reproduced cell by cell; where the paper disagrees with its own formula the
cell is re-derived by a brute-force evaluation of Theorem 1 that shares no code with the library:
exact rational binomial tails from math.comb, gamma and the floors gamma*n in 60-digit decimal
arithmetic, and a plain max over every n of a wide window.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from modelshare.cli import main
from modelshare.common.privacy.dps import (
    TABLE5_BETA,
    TABLE5_EPSILON_TOTAL,
    TABLE5_K,
    TABLE5_TREES,
    DPSError,
    compose,
    dps_delta,
    min_epsilon,
    table5,
)

# ------------------------------------------------------------------ brute force


def brute_d(k: int, beta: Fraction | str, eps: float | str, window: int = 200,
            require_peak: bool = True) -> tuple[Fraction, int, int]:
    """(d(k, beta, eps), the first n attaining it, n0) straight from Theorem 1.

    d = max_{n >= ceil(k/gamma - 1)} sum_{j > gamma*n}^{n} C(n, j) beta^j (1 - beta)^(n - j), with
    gamma = (e^eps - 1 + beta)/e^eps, trying every n from n0 on. beta and eps are taken exactly (a
    fraction, a float's binary value or a decimal string), so only e^-eps is rounded, to 60 digits. With
    require_peak the scan runs at least `window` terms and goes on until it is evidently far past
    the peak (the last 20 terms all below 1e-3 of the max); without it, it stops after `window`
    terms and the result is only a lower bound of d (a max over some of the n).
    """
    b = Fraction(beta)
    p, q = b.numerator, b.denominator
    terms: list[Fraction] = []
    with localcontext() as ctx:
        ctx.prec = 60
        bd, ed = Decimal(p) / Decimal(q), Decimal(eps)
        gamma = (ed.exp() - 1 + bd) / ed.exp()
        n0 = math.ceil(Decimal(k) / gamma - 1)
        n = n0
        while len(terms) <= window or (require_peak and max(terms[-20:]) >= max(terms) / 1000):
            assert n < n0 + 20_000, "brute force did not get past the peak"
            x = gamma * n
            m = int(x)  # floor(gamma*n): x > 0
            assert x - m > Decimal("1e-40") and m + 1 - x > Decimal("1e-40"), "gamma*n too close to an integer"
            tail = sum(math.comb(n, j) * p**j * (q - p) ** (n - j) for j in range(m + 1, n + 1))
            terms.append(Fraction(tail, q**n))
            n += 1
    best = max(terms)
    return best, n0 + terms.index(best), n0


def sig3(value: float) -> str:
    return f"{value:.2e}"


# ------------------------------------------------------------------ Table 5 of the paper

# Table 5 of Waseda, Nojima, Wang (2024), "Approximate value of Nt*delta for k = 5, 10, 20 and
# Nt = 10", transcribed from /work/shared/papers/kanon-rdt_waseda-nojima-wang-2024.txt.
# Rows are Nt*eps = 1.0 .. 9.0 (so eps = 0.1 .. 0.9 per tree). The text extraction dropped the
# superscript minus signs ("4.66 x 10 7" is 4.66e-7: these are probabilities); "-" is the paper's dash.
PAPER_TABLE5: dict[tuple[int, float], tuple[str, ...]] = {
    (5, 0.01): ("0.001", "5.52e-5", "7.68e-6", "1.86e-6", "7.47e-7", "2.417e-7", "1.22e-7", "1.22e-7", "5.47e-8"),
    (5, 0.1): ("-", "0.352", "0.127", "0.043", "0.028", "0.009", "0.009", "0.004", "0.002"),
    (5, 0.4): ("-", "-", "-", "-", "0.994", "0.963", "0.963", "0.498", "0.410"),
    (10, 0.01): ("4.66e-7", "1.08e-9", "2.72e-11", "1.68e-12", "2.85e-13", "3.19e-14", "8.51e-15", "4.07e-15",
                 "7.58e-16"),
    (10, 0.1): ("0.355", "0.034", "0.005", "0.001", "0.000", "3.93e-5", "2.05e-5", "4.53e-6", "1.87e-6"),
    (10, 0.4): ("-", "-", "-", "0.583", "0.348", "0.191", "0.175", "0.093", "0.078"),
    (20, 0.01): ("1.20e-13", "7.00e-19", "4.75e-22", "1.92e-24", "3.54e-26", "7.71e-28", "5.75e-29", "6.27e-30",
                 "5.06e-31"),
    (20, 0.1): ("0.045", "0.000", "7.82e-6", "2.37e-7", "1.61e-8", "1.03e-9", "1.48e-10", "1.56e-11", "2.82e-12"),
    (20, 0.4): ("-", "-", "0.426", "0.134", "0.051", "0.016", "0.008", "0.003", "0.001"),
}
PAPER_CELLS = [(k, beta, float(i + 1), printed)
               for (k, beta), row in PAPER_TABLE5.items() for i, printed in enumerate(row)]

# Cells outside Theorem 1 (per-tree eps = Nt*eps/10 below -ln(1 - beta): -ln(0.9) = 0.105 and
# -ln(0.6) = 0.511), which the library refuses. The paper printed numbers in eight of them.
OUT_OF_RANGE = {(k, 0.1, 1.0) for k in TABLE5_K} | {(k, 0.4, float(e)) for k in TABLE5_K for e in range(1, 6)}

# In-range cells where the paper's number is not its own formula at the precision it printed;
# pinned here to our value (3 significant digits), each re-derived by brute_d below.
PAPER_DISAGREES = {
    (5, 0.01, 3.0): "7.69e-06",  # paper 7.68e-6; exact 7.68604e-6 (truncated, not rounded, in the paper)
    (5, 0.01, 9.0): "5.46e-08",  # paper 5.47e-8; exact 5.46120e-8 (sup at n = n0 = 8: 10*P[Bin(8, .01) >= 5])
    (20, 0.4, 6.0): "1.66e-02",  # paper 0.016;   exact 0.0165539 (rounds to 0.017; sup at n = 31, not n0 = 29)
}


def printed_like(value: float, like: str) -> str:
    """`value` printed at the precision of the paper's entry `like` (its significant digits in
    scientific notation, its decimals otherwise). 'Match to 3 significant digits' can only be
    checked at the precision the paper printed: '0.043' carries two, '0.000' none."""
    if "e" in like:
        digits = len(like.split("e")[0].replace(".", ""))
        return f"{value:.{digits - 1}e}"
    return f"{value:.{len(like.split('.')[1])}f}"


def test_table5_axes_are_the_papers():
    assert (TABLE5_K, TABLE5_BETA, TABLE5_TREES) == ((5, 10, 20), (0.01, 0.1, 0.4), 10)
    assert TABLE5_EPSILON_TOTAL == tuple(float(e) for e in range(1, 10))
    assert len(PAPER_CELLS) == 81 and len(OUT_OF_RANGE) == 18


@pytest.mark.parametrize("k,beta,eps_total,paper", PAPER_CELLS, ids=lambda v: str(v))
def test_table5_cell(k, beta, eps_total, paper):
    grid = table5()
    key = (k, beta, eps_total)
    ours = grid.delta_total(*key)
    if key in OUT_OF_RANGE:
        assert ours is None and "-ln(1 - beta)" in grid.reasons[key]
        with pytest.raises(DPSError, match=r"below -ln\(1 - beta\)"):
            compose(k, beta, eps_total, TABLE5_TREES)
        return
    assert paper != "-", "the paper only dashes out-of-range cells"
    assert ours is not None and ours == compose(k, beta, eps_total, TABLE5_TREES).delta_total
    if key in PAPER_DISAGREES:
        assert sig3(ours) == PAPER_DISAGREES[key]
        assert printed_like(ours, paper) != printed_like(float(paper), paper)
    else:
        assert printed_like(ours, paper) == printed_like(float(paper), paper)


@pytest.mark.parametrize("key", sorted(PAPER_DISAGREES))
def test_cells_where_the_paper_disagrees_with_its_formula(key):
    """Independent re-derivation of the pinned cells: brute_d evaluates the theorem's max over n
    by direct exact summation (no scipy, no floats) and lands on our value, not the paper's.
    The paper rounds elsewhere (1.219e-7 -> 1.22e-7, 0.02751 -> 0.028, 0.9935 -> 0.994), so these
    three are slips of the paper: two truncations (7.686 -> 7.68, 0.01655 -> 0.016) and a typo
    (5.461 -> 5.47)."""
    k, beta, eps_total = key
    exact, _, _ = brute_d(k, str(beta), str(eps_total / TABLE5_TREES))
    delta_total = TABLE5_TREES * float(exact)
    assert sig3(delta_total) == PAPER_DISAGREES[key]
    assert table5().delta_total(*key) == pytest.approx(delta_total, rel=1e-9)


def test_paper_printed_the_formula_outside_its_range():
    """The paper's dashes are the cells where Nt*delta >= 1, not the range condition: it printed the
    formula's value in eight cells with eps < -ln(1 - beta). We refuse them (test_table5_cell); here
    the brute force shows where those numbers come from (0.051 is the truncated 0.0517)."""
    printed = {c[:3]: c[3] for c in PAPER_CELLS if c[:3] in OUT_OF_RANGE and c[3] != "-"}
    assert sorted(printed) == [(5, 0.4, 5.0), (10, 0.1, 1.0), (10, 0.4, 4.0), (10, 0.4, 5.0),
                               (20, 0.1, 1.0), (20, 0.4, 3.0), (20, 0.4, 4.0), (20, 0.4, 5.0)]
    for (k, beta, eps_total), paper in printed.items():
        exact, _, _ = brute_d(k, str(beta), str(eps_total / TABLE5_TREES))
        value = printed_like(TABLE5_TREES * float(exact), paper)
        if (k, beta, eps_total) == (20, 0.4, 5.0):
            assert (value, paper) == ("0.052", "0.051")
        else:
            assert value == paper
    dashed = [c[:3] for c in PAPER_CELLS if c[3] == "-"]
    assert len(dashed) == 10 and set(dashed) <= OUT_OF_RANGE
    for k, beta, eps_total in dashed:  # a lower bound of d suffices to show Nt*delta >= 1
        exact, _, _ = brute_d(k, str(beta), str(eps_total / TABLE5_TREES), window=20, require_peak=False)
        assert TABLE5_TREES * exact >= 1


# ------------------------------------------------------------------ independent derivation

SMALL = [(k, beta, eps) for k in (1, 2, 3, 5, 8)
         for beta, epss in (("0.05", ("0.06", "0.3", "1.5")), ("0.2", ("0.25", "0.8")), ("0.5", ("0.7", "2.5")))
         for eps in epss]


@pytest.mark.parametrize("k,beta,eps", SMALL)
def test_vectorised_search_equals_brute_force(k, beta, eps):
    exact, _, _ = brute_d(k, beta, eps)
    assert dps_delta(k, float(beta), float(eps)) == pytest.approx(float(exact), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 8), i=st.integers(4, 35), u=st.floats(1e-6, 3.0))
def test_vectorised_search_equals_brute_force_random(k, i, u):
    """Away from the range's edge: at eps = -ln(1 - beta) exactly, gamma * n can be an integer (beta = 0.5,
    n = 4: gamma * n = 3), and floor(gamma * n) then depends on the last bit of exp(eps) in float64 versus
    60 digits, a rounding artefact of the input, not a difference in the search (found by hypothesis:
    k = 2, beta = 0.5, u = 0)."""
    beta = i / 40
    eps = min_epsilon(beta) + u
    exact, _, _ = brute_d(k, Fraction(i, 40), eps)  # i/40 as a float is within 1e-16 of it
    assert dps_delta(k, beta, eps) == pytest.approx(float(exact), rel=1e-9)


def test_sup_is_not_always_at_the_lower_limit():
    """T(n) is a sawtooth in n, so the max over n is needed: for k = 5, beta = 0.4, eps = 0.8 it
    sits at n = 8, two above n0 = 6, and is larger than the n0 term P[Bin(6, 0.4) >= 5]."""
    exact, n_star, n0 = brute_d(5, "0.4", "0.8")
    at_n0 = sum(math.comb(6, j) * Fraction(2, 5) ** j * Fraction(3, 5) ** (6 - j) for j in (5, 6))
    assert (n0, n_star) == (6, 8) and exact > at_n0
    assert dps_delta(5, 0.4, 0.8) == pytest.approx(float(exact), rel=1e-12)


def test_huge_epsilon_where_gamma_rounds_to_one():
    """gamma = 1 - (1 - beta)e^-eps rounds to 1.0 for eps = 50 (and e^-800 underflows), yet gamma < 1,
    so n0 = k and d = P[Bin(k, beta) >= k] = beta^k."""
    for eps in (50.0, 800.0):
        assert dps_delta(5, 0.01, eps) == pytest.approx(0.01**5, rel=1e-12)


# ------------------------------------------------------------------ monotonicity

def _eps(beta: float, u: float) -> float:
    return min_epsilon(beta) + u


@settings(max_examples=150, deadline=None)
@given(k=st.integers(1, 30), dk=st.integers(1, 30), beta=st.floats(1e-3, 0.9), u=st.floats(0.0, 5.0))
def test_delta_decreases_as_k_grows(k, dk, beta, u):
    """Terms T(n) do not involve k; a larger k only raises the lower limit ceil(k/gamma - 1) of the
    max, so the max runs over a subset: d(k + dk) <= d(k)."""
    eps = _eps(beta, u)
    assert dps_delta(k + dk, beta, eps) <= dps_delta(k, beta, eps) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(k=st.integers(1, 30), beta=st.floats(1e-3, 0.9), u=st.floats(0.0, 5.0), du=st.floats(1e-6, 5.0))
def test_delta_decreases_as_epsilon_grows(k, beta, u, du):
    """Proof that d is non-increasing in eps. Let gamma < gamma' (gamma grows with eps), X_n ~ Bin(n, beta),
    n0 = ceil(k/gamma) - 1, n0' <= n0. For n >= n0' we have gamma'*n >= k - gamma' > k - 1, so
    T'(n) = P[X_n > gamma'*n] <= P[X_n >= k]. If n >= n0: T'(n) <= T(n) <= d (higher bar). If
    n0' <= n < n0: T'(n) <= P[X_n >= k] <= P[X_n0 >= k] = T(n0) <= d, since floor(gamma*n0) = k - 1.
    Hence d' = sup T' <= d."""
    eps = _eps(beta, u)
    assert dps_delta(k, beta, eps + du) <= dps_delta(k, beta, eps) * (1 + 1e-9)


def test_delta_is_not_monotone_in_beta():
    """The brief's 'increases as beta grows' does not follow from the theorem and is false: a larger
    beta raises gamma, which can lower n0 = ceil(k/gamma) - 1 (here from 11 to 10) and drop the peak
    term. Hence no property test for beta; the counterexample is checked by brute force."""
    low, _, n0_low = brute_d(5, "0.100", "0.5")
    high, _, n0_high = brute_d(5, "0.101", "0.5")
    assert (n0_low, n0_high) == (11, 10) and high < low
    assert dps_delta(5, 0.101, 0.5) < dps_delta(5, 0.100, 0.5)
    assert sig3(dps_delta(5, 0.100, 0.5)) == "2.75e-03" and sig3(dps_delta(5, 0.101, 0.5)) == "1.71e-03"
    # The paper's grid happens to increase along beta within each row of Table 5.
    grid = table5()
    for k in TABLE5_K:
        for e in TABLE5_EPSILON_TOTAL:
            values = [grid.delta_total(k, b, e) for b in TABLE5_BETA]
            present = [v for v in values if v is not None]
            assert present == sorted(present)


# ------------------------------------------------------------------ composition (Corollary 1)

@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 25), beta=st.floats(1e-3, 0.6), trees=st.integers(1, 20), u=st.floats(0.0, 3.0))
def test_composition_is_trees_times_per_tree_delta(k, beta, trees, u):
    eps_total = trees * _eps(beta, u) * (1 + 1e-9)
    g = compose(k, beta, eps_total, trees)
    assert g.epsilon_per_tree == pytest.approx(eps_total / trees, rel=1e-15)
    assert g.delta_per_tree == dps_delta(k, beta, eps_total / trees)
    assert g.delta_total == trees * g.delta_per_tree
    assert g.meaningful == (g.delta_total < 1)
    assert g.to_dict() == {"k": k, "beta": beta, "epsilon_total": eps_total, "trees": trees,
                           "epsilon_per_tree": g.epsilon_per_tree, "delta_per_tree": g.delta_per_tree,
                           "delta_total": g.delta_total, "meaningful": g.meaningful}


@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 25), beta=st.floats(1e-3, 0.6), trees=st.integers(1, 15), more=st.integers(1, 5),
       u=st.floats(0.0, 3.0))
def test_more_trees_for_the_same_budget_never_lower_delta_total(k, beta, trees, more, u):
    """Nt*d(E/Nt): both factors are non-decreasing in Nt (d is non-increasing in eps)."""
    eps_total = (trees + more) * _eps(beta, u) * (1 + 1e-9)
    assume(eps_total / (trees + more) >= min_epsilon(beta))
    few, many = compose(k, beta, eps_total, trees), compose(k, beta, eps_total, trees + more)
    assert many.delta_total >= few.delta_total * (1 - 1e-9)


def test_single_tree_is_theorem_1():
    assert compose(10, 0.1, 0.5, 1).delta_total == dps_delta(10, 0.1, 0.5)


def test_delta_total_of_one_or_more_is_no_guarantee():
    # k = 1, beta = 0.5, eps = 0.7 >= ln 2: d = P[Bin(1, 0.5) >= 1] = 1/2, so 10 trees give 5.
    g = compose(1, 0.5, 7.0, 10)
    assert g.delta_per_tree == pytest.approx(0.5) and g.delta_total == pytest.approx(5.0)
    assert not g.meaningful and g.to_dict()["meaningful"] is False
    assert compose(5, 0.01, 2.0, 10).meaningful


# ------------------------------------------------------------------ range errors

def test_boundary_epsilon_is_accepted_and_below_it_refused():
    floor = min_epsilon(0.1)
    assert floor == pytest.approx(-math.log(0.9))
    assert 0 < dps_delta(5, 0.1, floor) < 1
    with pytest.raises(DPSError, match=r"epsilon = .* is below -ln\(1 - beta\) = 0\.1054 for beta = 0\.1"):
        dps_delta(5, 0.1, math.nextafter(floor, 0.0))


@pytest.mark.parametrize("call,match", [
    (lambda: dps_delta(0, 0.1, 1.0), r"k = 0: .*integer >= 1"),
    (lambda: dps_delta(2.5, 0.1, 1.0), r"k = 2\.5"),  # type: ignore[arg-type]  # a float k on purpose
    (lambda: dps_delta(True, 0.1, 1.0), r"k = True"),
    (lambda: dps_delta(5, 0.0, 1.0), r"beta = 0\.0: .*strictly between 0 and 1"),
    (lambda: dps_delta(5, 1.0, 1.0), r"beta = 1\.0"),
    (lambda: dps_delta(5, float("nan"), 1.0), r"beta = nan"),
    (lambda: dps_delta(5, 0.1, float("inf")), r"epsilon = inf: must be a finite number"),
    (lambda: dps_delta(5, 0.1, -1.0), r"epsilon = -1 is below -ln\(1 - beta\)"),
    (lambda: compose(5, 0.1, 1.0, 0), r"trees = 0: .*integer >= 1"),
    (lambda: compose(5, 0.1, float("nan"), 3), r"epsilon_total = nan"),
    (lambda: compose(5, 0.1, 1.0, 10),
     r"epsilon per tree \(epsilon_total 1 / 10 trees\) = 0\.1 is below -ln\(1 - beta\) = 0\.1054"),
])
def test_errors_name_the_parameter_and_the_reason(call, match):
    with pytest.raises(DPSError, match=match):
        call()
    assert issubclass(DPSError, ValueError)


# ------------------------------------------------------------------ CLI

def test_cli_single_setting(capsys):
    assert main(["privacy", "dps", "--k", "5", "--beta", "0.01", "--epsilon", "2.0", "--trees", "10", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload == compose(5, 0.01, 2.0, 10).to_dict()
    assert sig3(payload["delta_total"]) == "5.52e-05" and payload["epsilon_per_tree"] == pytest.approx(0.2)
    assert main(["privacy", "dps", "--k", "5", "--beta", "0.01", "--epsilon", "2.0", "--trees", "10"]) == 0
    text = capsys.readouterr().out
    assert "5.52e-05" in text and "5.52e-06" in text and "0.2" in text and "-DPS" in text
    assert "no guarantee" not in text


def test_cli_trees_default_to_one(capsys):
    assert main(["privacy", "dps", "--k", "10", "--beta", "0.1", "--epsilon", "0.5", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["trees"] == 1 and payload["delta_total"] == dps_delta(10, 0.1, 0.5)


def test_cli_reports_no_guarantee(capsys):
    assert main(["privacy", "dps", "--k", "1", "--beta", "0.5", "--epsilon", "7", "--trees", "10"]) == 0
    assert "no guarantee" in capsys.readouterr().out
    assert main(["privacy", "dps", "--k", "1", "--beta", "0.5", "--epsilon", "7", "--trees", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["meaningful"] is False


def test_cli_table(capsys):
    assert main(["privacy", "dps", "--table"]) == 0
    text = capsys.readouterr().out
    for value in ("0.00108", "7.69e-06", "5.06e-31", "0.963", "0.0166", "--"):
        assert value in text
    assert main(["privacy", "dps", "--table", "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)
    assert len(cells) == 81
    refused = {(c["k"], c["beta"], c["epsilon_total"]) for c in cells if c["delta_total"] is None}
    assert refused == OUT_OF_RANGE
    assert all("-ln(1 - beta)" in c["reason"] for c in cells if c["delta_total"] is None)


@pytest.mark.parametrize("argv,message", [
    (["--k", "5", "--beta", "0.1", "--epsilon", "1.0", "--trees", "10"], "is below -ln(1 - beta) = 0.1054"),
    (["--k", "0", "--beta", "0.1", "--epsilon", "1.0"], "k = 0"),
    (["--k", "5", "--beta", "1.5", "--epsilon", "1.0"], "beta = 1.5"),
    (["--k", "5", "--beta", "0.1", "--epsilon", "1.0", "--trees", "0"], "trees = 0"),
    (["--beta", "0.1"], "needs --k, --epsilon"),
    (["--table", "--k", "5"], "drop --k"),
])
def test_cli_out_of_range_exits_2_with_one_line(capsys, argv, message):
    assert main(["privacy", "dps", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and captured.err.strip().count("\n") == 0
