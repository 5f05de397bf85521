"""What moved between the first bad commit and its parent, ranked."""

import math

from rlbisect.bisect.diagnose import compare, render


def test_the_biggest_relative_move_comes_first_and_float_round_off_last():
    parent = {"ratio = 1": 0.0, "padding": 3.8e-9, "kl": 0.017, "logp": 9.5e-7}
    bad = {"ratio = 1": 2.69, "padding": 0.0, "kl": 0.0058, "logp": 1.31}
    names = [r["name"] for r in compare(parent, bad)]
    assert names[:2] == ["ratio = 1", "logp"] and names[-1] == "padding"
    assert compare({"x": 0.0}, {"x": 0.0})[0]["relative"] == 0.0


def test_nan_and_a_value_only_one_side_measured_count_as_full_moves():
    rows = compare({"a": 1.0, "b": 1.0, "only_parent": 1.0}, {"a": 1.01, "b": math.nan, "only_bad": 2.0})
    assert [r["name"] for r in rows] == ["b", "only_bad", "only_parent", "a"]
    assert rows[1]["parent"] is None and rows[2]["first_bad"] is None
    text = render({"parent": "p" * 40, "first_bad": "b" * 40, "parent_verdict": "good",
                   "first_bad_verdict": "bad", "rows": rows}, limit=1)
    assert "b" * 10 in text and "3 more in the JSON" in text


def test_a_check_that_becomes_n_a_at_the_culprit_is_a_full_move_not_a_crash():
    """n/a arrives as None (a JSON null) or not at all: the table shows n/a and the answer stands."""
    parent = {"KL to reference > 0 after a step": 0.008, "mask = policy tokens": 0.0, "gone": 1.0}
    first_bad = {"KL to reference > 0 after a step": None, "mask = policy tokens": 3.0}
    rows = compare(parent, first_bad)
    by_name = {r["name"]: r for r in rows}
    assert by_name["KL to reference > 0 after a step"]["first_bad"] is None
    assert by_name["KL to reference > 0 after a step"]["relative"] == 1.0 and by_name["gone"]["first_bad"] is None
    text = render({"parent": "a" * 40, "parent_verdict": "good", "first_bad": "b" * 40,
                   "first_bad_verdict": "bad", "rows": rows})
    assert "n/a" in text and "+3" in text


def test_a_fix_search_is_told_in_its_own_words():
    diagnosis = {"parent": "p" * 40, "first_bad": "f" * 40, "parent_verdict": "good", "first_bad_verdict": "bad",
                 "rows": compare({"loss": 1.0}, {"loss": 0.5})}
    fix = render(diagnosis, terms=("broken", "fixed"))
    assert "(parent, broken)" in fix and "(first fixed, fixed)" in fix and "first bad" not in fix
    assert "(parent, good)" in render(diagnosis) and "(first bad, bad)" in render(diagnosis)
