"""The short-run predicate: options, scoring, the worker on real TinyAgent code, its false-positive
rate on real runs of identical code, and a skip (never a guess) when the spread hides the answer."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from rlbisect.bisect import PredicateError, make_predicate
from rlbisect.bisect.predicates.short_run import ShortRunOptions, ShortRunPredicate, score
from rlbisect.bisect.stats import Rule

ROOT = Path(__file__).resolve().parents[2]


def test_options_are_validated():
    assert make_predicate("short-run", options={"steps": 4, "seeds": 2}).options.steps == 4
    for bad in (dict(steps="x"), dict(seeds=0), dict(direction="up"), dict(alpha=2), dict(bogus=1),
                dict(seeds=5, max_seeds=3)):
        with pytest.raises(PredicateError):
            make_predicate("short-run", options=bad)
    with pytest.raises(PredicateError, match="no command"):
        make_predicate("short-run", command=["true"])


def test_score_uses_the_last_window_or_the_last_eval():
    rows = [{"reward": r, **({"eval_pass": e} if e is not None else {})}
            for r, e in [(0.1, 0.2), (0.2, None), (0.3, None), (0.5, 0.4)]]
    assert score(rows, "reward", 2) == pytest.approx(0.4)
    assert score(rows, "eval_pass", 2) == pytest.approx(0.4)
    with pytest.raises(KeyError, match="not in the run"):
        score(rows, "kl_ref", 2)


def test_identity_depends_on_good_and_options():
    a, b = ShortRunPredicate(ShortRunOptions()), ShortRunPredicate(ShortRunOptions(metric="eval_pass"))
    a.setup("a" * 40, lambda: Path("."))
    assert a.identity() != b.identity() and "a" * 40 in a.identity()


def worker(*args):
    return subprocess.run([sys.executable, "-I", "-m", "rlbisect.bisect.predicates.short_run", str(ROOT), *args],
                          capture_output=True, text=True, timeout=300)


def test_worker_trains_the_worktrees_code_and_is_deterministic():
    a = worker("--steps", "2", "--seeds", "0,1")
    assert a.returncode == 0, a.stderr
    scores = json.loads(a.stdout)
    assert set(scores) == {"0", "1"} and scores["0"] != scores["1"]     # seeds differ
    assert worker("--steps", "2", "--seeds", "0,1").stdout == a.stdout
    bad = worker("--steps", "2", "--runner", "no_such_module:f")   # not there: cannot probe
    assert bad.returncode == 2 and "ModuleNotFoundError" in bad.stderr


def test_false_positive_rate_on_real_runs_of_identical_code():
    """Unmatched seeds make identical code look different only by the seed spread: the rule must
    call it bad at most alpha of the time (matched seeds would make it exactly 0)."""
    from reference_trainer.train import short_run
    runs = [score(short_run(8, seed), "reward", 4) for seed in range(18)]
    rule, rng, bad = Rule(), random.Random(0), 0
    trials = 400
    for _ in range(trials):
        pool = rng.sample(runs, 18)
        good, probe = pool[:9], pool[9:]
        for k in rule.schedule():
            verdict, _ = rule.decide(good[:k], probe[:k], "lower")
            if verdict != "unknown":
                break
        bad += verdict == "bad"
    assert bad / trials <= rule.alpha


RUNNER = """
import pathlib, random
def run(steps, seed):
    # the metric: GOOD's per-seed noise, shifted by what this commit's `shift` file says
    shift = float(pathlib.Path(__file__).with_name("shift").read_text())
    return [{"reward": 0.5 + random.Random(seed).gauss(0, 0.2) + shift}]
"""


def test_a_difference_hidden_by_the_spread_is_skipped_not_guessed(tmp_path):
    """Commit 1 shifts the metric by less than the seed spread can resolve in 9 seeds: skip, not a
    guess; commit 2 shifts it far: bad. git is left with both as candidates (exit 3)."""
    from rlbisect.bisect import bisect
    repo = tmp_path / "r"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    import os
    env = {**os.environ, **env}
    (repo / "noisy_runner.py").write_text(RUNNER)
    shas = []
    for i, shift in enumerate(["0.0", "-0.12", "-1.0"]):   # -0.12: p 0.19 -> 0.11 over 3..9 seeds
        (repo / "shift").write_text(shift)
        if i == 0:
            subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", f"c{i}"], cwd=repo, check=True, env=env)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                   env=env).stdout.strip())
    pred = make_predicate("short-run", options=dict(runner="noisy_runner:run", steps=1, window=1))
    result = bisect(repo, f"{shas[0]}..{shas[2]}", pred)
    verdicts = {p.commit: p for p in result.probes}
    assert verdicts[shas[1]].verdict == "skip" and "unknown after 9 seeds" in verdicts[shas[1]].reason
    assert result.status == "ambiguous" and set(result.candidates) == {shas[1], shas[2]}
    assert verdicts[shas[1]].values["seeds"] == 9.0
    # the answer rests on both endpoints, so both were run: BAD is worse, GOOD is GOOD
    assert (verdicts[shas[2]].role, verdicts[shas[2]].verdict) == ("BAD", "bad")
    assert (verdicts[shas[0]].role, verdicts[shas[0]].verdict) == ("GOOD", "good")


CRASHING = """
import math, random
MODE = {mode!r}
def run(steps, seed):
    reward = 0.5 + random.Random(seed).gauss(0, 0.05)
    if MODE == "raise":            # e.g. a division by a flat group's zero std
        return [{{"reward": reward / 0.0}}]
    if MODE == "nan":
        return [{{"reward": float("nan")}}]
    return [{{"reward": reward}}]
"""


@pytest.mark.parametrize("mode", ["raise", "nan"])
def test_the_code_under_test_crashing_or_going_nan_is_named_bad(tmp_path, mode):
    """Not 'could not train' (a skip): the commit that makes training raise or go NaN is the one."""
    from helpers import git_as_tester

    from rlbisect.bisect import bisect
    repo = tmp_path / "r"
    repo.mkdir()
    git_as_tester(repo, "init", "-q")
    shas = []
    for i, m in enumerate(["ok", "ok", "ok", mode, mode, mode]):
        (repo / "mytrainer.py").write_text(CRASHING.format(mode=m) + f"# {i}\n")
        git_as_tester(repo, "add", "-A")
        git_as_tester(repo, "commit", "-qm", f"c{i} {m}")
        shas.append(git_as_tester(repo, "rev-parse", "HEAD"))
    pred = make_predicate("short-run", options=dict(runner="mytrainer:run", steps=1, window=1))
    result = bisect(repo, f"{shas[0]}..{shas[-1]}", pred)
    assert result.status == "found" and result.first_bad == shas[3], result.summary()
    culprit = next(p for p in result.probes if p.commit == shas[3])
    said = "ZeroDivisionError" if mode == "raise" else "not finite"
    assert culprit.verdict == "bad" and said in culprit.reason + culprit.output
