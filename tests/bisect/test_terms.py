"""--find-fix / --terms OLD,NEW: the first commit where the predicate starts passing, on the same
evidence rules as a regression (the predicate fails at OLD and passes at NEW, both confirmed)."""

from __future__ import annotations

import pytest

from rlbisect.bisect import BisectOptions, bisect, make_predicate
from rlbisect.bisect.predicates import Probe
from rlbisect.bisect.terms import invert, reword
from rlbisect.errors import Status, Verdict

#: passes where the state file says good: a fix is a bad -> good change
PASSES = ["sh", "-c", '[ "$(cat state)" = good ]']


def test_find_fix_names_the_first_commit_that_passes(tiny_repo, run_cli):
    r = tiny_repo(["bad"] * 5 + ["good"] * 3)
    code, out, data = run_cli(["main~7..main", "--repo", str(r.path), "--find-fix", "--"] + PASSES)
    assert code == 0 and data["first_bad"] == r.shas[5], out
    assert f"{r.shas[5]} is the first fixed commit" in out
    assert data["terms"] == {"old": "broken", "new": "fixed"}
    terms = {p["commit"]: p["term"] for p in data["probes"]}
    assert all(terms[c] == ("fixed" if r.shas.index(c) >= 5 else "broken") for c in terms)


def test_terms_name_the_two_states(tiny_repo, run_cli):
    r = tiny_repo(["bad"] * 3 + ["good"] * 3)
    code, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--terms", "slow,fast", "--"] + PASSES)
    assert code == 0 and data["first_bad"] == r.shas[3] and f"{r.shas[3]} is the first fast commit" in out


def test_both_ends_are_confirmed_and_the_messages_say_fix(tiny_repo, run_cli):
    r = tiny_repo(["good"] * 4)                              # OLD already passes
    code, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--find-fix", "--no-cache", "--"] + PASSES)
    assert code == 6 and data["first_bad"] is None
    assert "OLD (broken) already passes the predicate" in out and "GOOD fails" not in out
    assert f"\n  OLD {r.shas[0][:10]}: fixed (exit 0)" in out and f"GOOD {r.shas[0][:10]}" not in out
    r = tiny_repo(["bad"] * 4, name="never")                  # NEW still fails
    code, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--find-fix", "--no-cache", "--"] + PASSES)
    assert code == 5 and "NEW (fixed) still fails the predicate" in out and "the fix is not in this range" in out
    assert f"\n  NEW {r.shas[3][:10]}: broken (exit 1)" in out and f"BAD {r.shas[3][:10]}" not in out


def test_a_regression_search_and_a_fix_search_keep_their_own_cached_verdicts(tiny_repo, run_cli):
    r = tiny_repo(["bad"] * 3 + ["good"] * 3)
    spec = ["main~5..main", "--repo", str(r.path), "--verify", "0"]
    code, _, fix = run_cli(spec + ["--find-fix", "--"] + PASSES)
    assert code == 0 and fix["first_bad"] == r.shas[3]
    code, _, regression = run_cli(spec + ["--"] + PASSES)     # fails at GOOD, passes at BAD: no culprit
    assert code in (5, 6) and not any(p["cached"] for p in regression["probes"])
    code, _, again = run_cli(spec + ["--find-fix", "--"] + PASSES)
    assert code == 0 and again["first_bad"] == r.shas[3] and all(p["cached"] for p in again["probes"])


@pytest.mark.parametrize("args,needle", [(["--terms", "a,a"], "two different words"),
                                         (["--terms", "one"], "give two words"),
                                         (["--terms", "a,b", "--find-fix"], "not both"),
                                         (["--find-fix", "--predicate", "short-run"], "judges each commit against GOOD")])
def test_bad_terms_are_bad_input(tiny_repo, run_cli, args, needle):
    r = tiny_repo(["bad", "good"])
    extra = [] if "--predicate" in args else ["--"] + PASSES
    code, out, _ = run_cli(["main~1..main", "--repo", str(r.path), *args, *extra])
    assert code == 2 and needle in out, out


def test_invert_swaps_good_and_bad_only():
    assert invert(Probe(Verdict.GOOD, reason="ok")).verdict is Verdict.BAD
    bad = invert(Probe(Verdict.BAD, {"exit_code": 127.0}, confirm_on_good=True))
    assert bad.verdict is Verdict.GOOD and not bad.confirm_on_good
    assert invert(Probe(Verdict.SKIP)).verdict is Verdict.SKIP
    assert invert(Probe(Verdict.ABORT)).verdict is Verdict.ABORT
    assert reword("GOOD fails the predicate: the regression is older than the range", ("old", "new")) == \
        "OLD (old) already passes the predicate: the fix is older than the range"
    # the measured search's answers and the noisy search's named ends, said for a fix
    said = reword("no regression to bisect: the metric changed at commit 1, but fell: not a regression in "
                  "the direction asked", ("broken", "fixed"))
    assert "regression" not in said and said.startswith("no fix to bisect") and "not a fix in the direction" in said
    assert reword("GOOD already bad", ("a", "b")) == "OLD (a) already passes"
    assert reword("no regression in range", ("a", "b")) == "no fix in range"


def test_the_python_api_takes_terms(tiny_repo):
    r = tiny_repo(["bad", "bad", "good"])
    res = bisect(r.path, "main~2..main", make_predicate(command=PASSES),
                 BisectOptions(terms=("broken", "fixed"), use_cache=False, verify=0))
    assert res.status is Status.FOUND and res.first_bad == r.shas[2]
    assert res.summary().startswith(f"{r.shas[2]} is the first fixed commit")


def test_a_noisy_fix_search_counts_passes(tiny_repo, run_cli):
    r = tiny_repo(["bad"] * 3 + ["good"] * 3)
    code, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--find-fix", "--flaky", "--no-cache", "--"] + PASSES)
    assert code == 0 and data["first_bad"] == r.shas[3] and "is the first fixed commit" in out
    assert "pass rate before the fix" in out and "failure rate" not in out


def test_fix_searches_share_verdicts_whatever_their_words(tiny_repo, run_cli):
    r = tiny_repo(["bad"] * 2 + ["good"] * 2)
    spec = ["main~3..main", "--repo", str(r.path), "--verify", "0"]
    assert run_cli(spec + ["--find-fix", "--"] + PASSES)[0] == 0
    code, out, data = run_cli(spec + ["--terms", "slow,fast", "--"] + PASSES)
    assert code == 0 and all(p["cached"] for p in data["probes"]) and "is the first fast commit" in out


def test_a_measured_fix_search_names_its_ends_old_and_new():
    from rlbisect.bisect.report import BisectResult, ProbeRecord
    probes = [ProbeRecord(i + 1, sha, "good", 0.1, {"reward": x}, "ran", False, "", "", 0.0, role=role)
              for i, (sha, x, role) in enumerate([("a" * 40, 0.2, "GOOD"), ("b" * 40, 0.3, "BAD")])]
    for terms, said in ((("broken", "fixed"), "reward at OLD median 0.2 over 1 runs, NEW median 0.3"),
                        (None, "reward at GOOD median 0.2 over 1 runs, BAD median 0.3")):
        result = BisectResult("a" * 40, "b" * 40, terms=terms, probes=probes, extra={"metric": "reward"})
        assert said in result.summary()
