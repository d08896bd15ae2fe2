"""ci/fidelity.py's verdict: Fisher's exact test, two-sided, checked against its definition summed
in floating point, and on the case the reference's interval judged wrong."""
import importlib.util
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fidelity", os.path.join(os.path.dirname(HERE), "fidelity.py"))
fidelity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fidelity)


def brute_force(k1, n1, k2, n2):
    """The same test by its definition, over floats: every table with the margins, no more likely."""
    total = k1 + k2
    def prob(x):
        return math.comb(n1, x) * math.comb(n2, total - x) / math.comb(n1 + n2, total)
    seen = prob(k1)
    return sum(prob(x) for x in range(max(0, total - n2), min(total, n1) + 1) if prob(x) <= seen * (1 + 1e-9))


def test_two_counts_alike_are_not_called_different_when_one_is_outside_the_others_interval():
    # The case of issue 37: 2/1200 under faultline against 5/1200 bare through a pipe. 2/1200 lies
    # below the reference's Wilson interval, but the counts do not differ.
    lo, hi = fidelity.wilson(5, 1200)
    assert not lo <= 2 / 1200 <= hi
    p = fidelity.fisher_two_sided(2, 1200, 5, 1200)
    assert abs(p - 0.4520) < 1e-3
    assert p >= fidelity.FAITHFUL_ALPHA


def test_counts_that_differ_are_flagged():
    p = fidelity.fisher_two_sided(5, 60, 20, 60)
    assert abs(p - 0.00131) < 1e-4
    assert p < fidelity.FAITHFUL_ALPHA


def test_matches_the_definition_and_is_symmetric():
    for k1, n1, k2, n2 in [(0, 10, 0, 10), (3, 10, 1, 12), (0, 300, 7, 300), (48, 200, 93, 200), (10, 10, 0, 10)]:
        p = fidelity.fisher_two_sided(k1, n1, k2, n2)
        assert abs(p - brute_force(k1, n1, k2, n2)) < 1e-9
        assert abs(p - fidelity.fisher_two_sided(k2, n2, k1, n1)) < 1e-12
        assert 0.0 < p <= 1.0
    assert fidelity.fisher_two_sided(0, 10, 0, 10) == 1.0
