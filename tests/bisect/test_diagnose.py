"""What moved between the first bad commit and its parent, ranked."""

import math

from rlbisect.bisect.diagnose import compare, render


def test_the_biggest_relative_move_comes_first_and_float_round_off_last():
    parent = {"ratio = 1": 0.0, "padding": 3.8e-9, "kl": 0.017, "logp": 9.5e-7}
    bad = {"ratio = 1": 2.69, "padding": 0.0, "kl": 0.0058, "logp": 1.31}
    names = [r["name"] for r in compare(parent, bad)]
    assert names[:2] == ["ratio = 1", "logp"] and names[-1] == "padding"
    assert compare({"x": 0.0}, {"x": 0.0})[0]["relative"] == 0.0


def test_nan_counts_as_a_full_move_and_only_shared_values_are_compared():
    rows = compare({"a": 1.0, "b": 1.0, "only_parent": 1.0}, {"a": 1.01, "b": math.nan, "only_bad": 2.0})
    assert [r["name"] for r in rows] == ["b", "a"]
    text = render({"parent": "p" * 40, "first_bad": "b" * 40, "parent_verdict": "good",
                   "first_bad_verdict": "bad", "rows": rows}, limit=1)
    assert "b" * 10 in text and "1 more in the JSON" in text
