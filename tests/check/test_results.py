"""One result per check: n/a is neither a pass nor a failure, through the merge over probe seeds
and into the JSON and the exit code."""

from rlbisect.check.results import CheckResult, as_json, exit_code, over_seeds


def test_na_is_neither_a_pass_nor_a_failure_wherever_it_goes():
    na = CheckResult("x", float("nan"), True, na="no reference model")   # as producers build it
    assert na.passed is None and not na.failed
    assert as_json({"x": na})["x"] == {"value": None, "passed": None, "na": "no reference model"}
    assert exit_code([None, None]) == 125 and exit_code([True, None]) == 0 and exit_code([None, False]) == 1


def test_over_seeds_shows_the_failing_seed_not_an_na_one():
    runs = {1: {"x": CheckResult("x", float("nan"), True, na="flat batch")},
            2: {"x": CheckResult("x", 3.0, False)}}
    merged = over_seeds(runs)["x"]
    assert merged.failed and merged.seed == 2 and merged.value == 3.0
