"""``--flaky`` with short runs and ``--metric``: the measured search through the real driver,
on a toy trainer whose every commit reseeds its stream (history_fixtures/noisy_trainer.py)."""

import copy
import sys
from collections import defaultdict

import pytest

from helpers import git
from history_fixtures.noisy_trainer import build
from rlbisect.bisect import bisect, make_predicate
from rlbisect.bisect.executors import LocalExecutor
from rlbisect.bisect.options import BisectOptions
from rlbisect.errors import Cause, Status, Verdict

pytestmark = pytest.mark.slow   # each probe starts the toy trainer

COMMAND = [sys.executable, "train.py", "--seed", "{seed}", "--out", "{out}"]


def predicate():
    return make_predicate("short-run", command=COMMAND,
                          options={"metric": "reward", "direction": "lower"})


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("noisy") / "repo"
    return root, build(root, 12, 8, 3.0, salt=4)


def test_the_measured_search_names_the_culprit_from_one_run_per_probe(history):
    root, shas = history
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True, use_cache=False))
    assert res.status is Status.FOUND and res.first_bad == shas[8] and res.strategy == "measured"
    assert all(p.cause is Cause.MEASURED and "reward" in p.values for p in res.probes)
    seeds = defaultdict(list)
    for p in res.probes:          # the n-th run at a commit on seed n, at every commit
        seeds[p.commit].append(int(p.values["seed"]))
    assert all(sorted(s) == list(range(len(s))) for s in seeds.values())
    assert len({p.values["reward"] for p in res.probes}) == len(res.probes)   # reseeded: never a repeat
    assert res.extra["n_runs"] == len(res.probes) and "median" in res.message
    assert "reward at GOOD median" in res.summary()


def test_a_deterministic_trainers_repeats_are_read_as_repeats(tmp_path):
    # every commit keeps the stream: each commit before the culprit logs GOOD's rewards again on
    # the same seeds, which says no change lies between them (measured_pairs), not a new draw
    root = tmp_path / "repo"
    shas = build(root, 12, 8, 3.0, salt=4, kept=True)
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True, use_cache=False))
    assert res.status is Status.FOUND and res.first_bad == shas[8]
    rewards = [(p.values["seed"], p.values["reward"]) for p in res.probes]
    assert len(set(rewards)) < len(rewards)
    prints = defaultdict(set)   # a repeat is the whole record again (its step times aside), not the score only
    for run, p in zip(rewards, res.probes):
        prints[run].add(p.detail["fingerprint"])
    assert all(len(f) == 1 for f in prints.values()) and len(set.union(*prints.values())) == len(prints)


def test_the_command_line_answers_and_plots_the_runs(history, run_cli, tmp_path):
    root, shas = history
    png, md = tmp_path / "runs.png", tmp_path / "report.md"
    code, out, data = run_cli([f"{shas[0]}..{shas[-1]}", "--repo", str(root), "--flaky", "--predicate", "short-run",
                               "--metric", "reward", "--direction", "lower", "--plot", str(png), "--report", str(md),
                               "--no-cache", "--", *COMMAND])   # the module's history: its cache is another test's
    assert code == 0 and data["first_bad"] == shas[8] and "is the first bad commit" in out, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "runs-evidence.png").exists()
    table = [ln for ln in md.read_text().splitlines() if ln.startswith("| ") and "`" in ln]
    assert len(table) == len(data["probes"]) and all(" | ran | " in ln for ln in table)   # numbers, not verdicts
    assert {p["verdict"] for p in data["probes"]} == {"ran"}


def test_runs_recorded_from_another_good_are_evidence_for_the_next_search(tmp_path):
    """A run's number does not depend on GOOD: a second bisect from a later GOOD made every run anew."""
    root = tmp_path / "repo"
    shas = build(root, 12, 8, 3.0, salt=4)
    first = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True))
    second = bisect(root, f"{shas[4]}..{shas[-1]}", predicate(), BisectOptions(flaky=True))
    assert first.first_bad == second.first_bad == shas[8]
    reused = [p for p in second.probes if p.cached]
    assert reused and {p.commit for p in reused} <= {p.commit for p in first.probes}


def test_a_command_that_fails_at_every_run_is_no_answer_not_no_regression(history):
    """Every run ranked worst read as "nothing changed": exit 5 after 19 runs, none of which gave a number."""
    root, shas = history
    broken = [sys.executable, "train.py", "--seed", "{seed}", "--output", "{out}"]   # argparse: exit 2
    pred = make_predicate("short-run", command=broken, options={"metric": "reward", "direction": "lower"})
    res = bisect(root, f"{shas[0]}..{shas[-1]}", pred, BisectOptions(flaky=True, use_cache=False))
    assert res.status is Status.GOOD_FAILS and res.first_bad is None and len(res.probes) == 4, res.summary()
    assert "no run at GOOD or BAD gave a number for reward (4 runs" in res.message


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_metric_the_runs_do_not_log_stops_the_search_at_once(history, jobs):
    # a round's runs take different seeds, and a reason naming its seed hid that every run said the same
    root, shas = history
    pred = make_predicate("short-run", command=COMMAND, options={"metric": "rewrd", "direction": "lower"})
    res = bisect(root, f"{shas[0]}..{shas[-1]}", pred, BisectOptions(flaky=True, use_cache=False, jobs=jobs))
    assert res.status is Status.AMBIGUOUS and len(res.probes) == 3 + (jobs > 1) and res.first_bad is None
    assert "'rewrd' is not in the run's rows (have: reward, step)" in res.message and "cannot run here" in res.message


def test_recorded_runs_are_evidence_for_the_next_search(history):
    root, shas = history
    first = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True))
    again = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True))
    recorded = [p for p in again.probes if p.cached]
    assert first.first_bad == again.first_bad == shas[8]
    assert len(recorded) >= len([p for p in first.probes if not p.cached])
    assert again.extra["n_runs"] < first.extra["n_runs"]   # new runs only where still needed
    fresh = defaultdict(list)
    for p in again.probes:   # a fresh run continues its commit's seeds after the recorded ones
        fresh[p.commit].append(int(p.values["seed"]))
    assert all(len(set(s)) == len(s) for s in fresh.values())


def test_jobs_run_rounds_of_the_measured_search(history):
    root, shas = history
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(),
                 BisectOptions(flaky=True, jobs=3, use_cache=False))
    assert res.first_bad == shas[8] and res.rounds < len(res.probes)


def test_crashing_runs_are_the_worst_outcome(tmp_path):
    root = tmp_path / "repo"
    shas = build(root, 8, 5, 0.0, salt=1)
    from helpers import git
    text = (root / "train.py").read_text()   # from a new commit on, training raises
    (root / "train.py").write_text(text.replace("a = p.parse_args()", "a = p.parse_args()\nraise SystemExit(3)"))
    git(root, "commit", "-qam", "training breaks")
    bad = git(root, "rev-parse", "HEAD").strip()
    res = bisect(root, f"{shas[0]}..{bad}", predicate(), BisectOptions(flaky=True, use_cache=False))
    assert res.status is Status.FOUND and res.first_bad == bad
    assert any(p.verdict is Verdict.BAD for p in res.probes)


def test_a_value_that_is_not_a_number_is_said_as_what_it_was(tmp_path):
    """A reward logged as the string "n/a" ranks as the worst outcome, and the probe says so: it read
    "reward = nan"."""
    root = tmp_path / "repo"
    shas = build(root, 4, 2, 0.0, salt=1)
    text = (root / "train.py").read_text()
    (root / "train.py").write_text(text.replace('"reward": final - 0.1 * (3 - step)', '"reward": "n/a"'))
    git(root, "commit", "-qam", "reward not logged as a number")
    bad = git(root, "rev-parse", "HEAD").strip()
    res = bisect(root, f"{shas[0]}..{bad}", predicate(), BisectOptions(flaky=True, use_cache=False))
    said = [p.reason for p in res.probes if p.commit == bad]
    assert said and all("reward = a string ('n/a') (the worst outcome)" in r for r in said), said


def test_a_flat_metric_with_a_smallest_move_ends_nothing_changed(tmp_path):
    root = tmp_path / "flat"
    shas = build(root, 12, 6, 0.0, salt=9)
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(),
                 BisectOptions(flaky=True, use_cache=False, min_effect=1.0, max_runs=150))
    assert res.status is Status.BAD_PASSES and res.first_bad is None
    assert "no drop of 1 seed spreads or more" in res.message
    assert 16 <= res.extra["n_runs"] < 150 and res.extra["min_effect"] == 1.0


def test_find_fix_searches_the_numbers_for_the_move_back(tmp_path):
    root = tmp_path / "fixed"
    shas = build(root, 12, 5, -3.0, salt=11)       # the reward is 3 spreads higher from commit 5 on
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(),
                 BisectOptions(flaky=True, use_cache=False, terms=("broken", "fixed")))
    assert res.status is Status.FOUND and res.first_bad == shas[5] and res.strategy == "measured"
    assert res.extra["direction"] == "higher"
    broke = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(flaky=True, use_cache=False))
    assert broke.status is Status.BAD_PASSES and "rose" in broke.message   # no regression: it got better
    assert f"changed at commit {shas[5][:10]}" in broke.message               # a commit, not a position


@pytest.mark.parametrize("kept", [False, True])
def test_per_commit_verdicts_say_when_they_are_only_tests_at_the_spread(tmp_path, kept):
    # without --flaky: a good verdict whose runs differ from GOOD's on the same seeds is a test at
    # the seed spread (the stream changed); one whose runs repeat GOOD's is an identity
    root = tmp_path / "repo"
    shas = build(root, 6, 4, 6.0, salt=2, kept=kept)
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(use_cache=False, per_commit=True))
    assert res.status is Status.FOUND and res.first_bad == shas[4]
    goods = [p for p in res.probes if p.verdict is Verdict.GOOD and "reproduced" in p.detail]
    assert goods and all(p.detail["reproduced"] is kept for p in goods)
    assert ("good verdicts rest on runs unlike GOOD's" in res.summary()) is not kept


class OnCopies(LocalExecutor):
    """Each probe on a copy of the predicate, as a remote executor's node holds one."""

    def submit(self, commit, checkout, predicate, timeout):
        return super().submit(commit, checkout, copy.deepcopy(predicate), timeout)


@pytest.mark.parametrize("kept", [False, True])
def test_without_flaky_the_search_switches_to_the_measured_one_when_seeds_do_not_match(tmp_path, kept):
    # a good verdict on runs unlike GOOD's on the same seeds is only a test at the spread: from the
    # first one the search pools runs instead; where runs repeat GOOD's it judges commit by commit
    root = tmp_path / "repo"
    shas = build(root, 12, 4, 3.0, salt=5, kept=kept)
    res = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(use_cache=False))
    assert res.status is Status.FOUND and res.first_bad == shas[4]
    per_commit = [p for p in res.probes if p.role == "per-commit"]
    if kept:
        assert res.strategy == "git" and not per_commit and "switched" not in res.extra
        return
    switched = res.extra["switched"]
    assert res.strategy == "measured" and len(per_commit) == switched["per_commit_probes"] >= 1
    assert per_commit[-1].commit == switched["at"] and per_commit[-1].verdict is Verdict.GOOD
    assert per_commit[-1].detail["reproduced"] is False and switched["per_commit_runs"] >= 6
    # the per-commit runs are draws the measured search starts from (GOOD's and the probes')
    assert switched["pooled_runs"] == switched["per_commit_runs"] and sum(res.extra["runs_per_commit"].values()) == \
        res.extra["n_runs"] + switched["pooled_runs"]
    assert "did not repeat GOOD's on the same seeds" in res.summary()
    assert res.to_json()["n_probes"] == len(res.probes) - len(per_commit) == res.extra["n_runs"]
    # as on a Ray cluster, each probe on a copy of the predicate that is gone after it: the same runs
    # are pooled, read from what the probes returned
    on_copies = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(use_cache=False),
                       executor=OnCopies())
    assert on_copies.first_bad == shas[4] and on_copies.extra["switched"] == switched
    kept_per_commit = bisect(root, f"{shas[0]}..{shas[-1]}", predicate(), BisectOptions(use_cache=False, per_commit=True))
    assert kept_per_commit.strategy == "git" and "switched" not in kept_per_commit.extra
    with pytest.raises(ValueError, match="--per-commit"):
        BisectOptions(flaky=True, per_commit=True)


def test_across_a_merge_the_search_keeps_judging_commit_by_commit(tmp_path):
    """The measured search follows first parents: switched to it on a range with merges, the search
    named the merge a side branch came in with. It switches there only with --first-parent."""
    root = tmp_path / "repo"
    shas = build(root, 12, 4, 3.0, salt=5)
    git(root, "checkout", "-q", "-b", "side", shas[-3])
    (root / "NOTES").write_text("side\n")
    git(root, "add", "NOTES")
    git(root, "commit", "-qm", "side note")
    git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    res = bisect(root, f"{shas[0]}..main", predicate(), BisectOptions(use_cache=False))
    assert res.strategy == "git" and "switched" not in res.extra and not res.first_parent
    assert res.status is Status.FOUND and res.first_bad == shas[4]
    fp = bisect(root, f"{shas[0]}..main", predicate(), BisectOptions(use_cache=False, first_parent=True))
    assert fp.strategy == "measured" and fp.first_bad == shas[4]
