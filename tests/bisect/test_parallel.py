"""`--jobs J`: k-ary rounds name what one probe at a time names, and clean up on every path."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from helpers import git, live_members, monotone_states, random_dag, sweep

from rlbisect.bisect import BisectOptions, Probe, bisect, make_predicate
from rlbisect.bisect.predicates import BasePredicate

SEED = 20250611
_SHA = r"[0-9a-f]{40}"


def random_history(rng: random.Random, noisy: bool = False):
    """(states, parents, culprit, first_parent): a random DAG (linear or with merges) whose
    verdict is monotone — bad exactly where ``culprit`` is an ancestor — except for runs of
    untestable commits (exit 125) and, if ``noisy``, a few flipped verdicts."""
    parents, merges, reach = random_dag(rng, rng.randint(6, 40))
    culprit, states = monotone_states(rng, reach)
    n = len(states)
    if noisy:
        for _ in range(rng.randint(1, 3)):
            states[rng.randint(1, n - 2)] = rng.choice(["good", "bad"])
    states[0], states[-1] = "good", "bad"
    return states, parents, culprit, merges and rng.random() < 0.4


def expected_culprit(parents: list[list[int]], culprit: int, first_parent: bool) -> int:
    """The first bad commit a monotone verdict defines: the culprit itself, or with
    --first-parent the oldest commit of BAD's first-parent chain that contains it."""
    if not first_parent:
        return culprit
    chain, c = [], len(parents) - 1
    while True:
        chain.append(c)
        if not parents[c]:
            break
        c = parents[c][0]

    def has(c: int) -> bool:
        seen, stack = set(), [c]
        while stack:
            x = stack.pop()
            if x == culprit:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(parents[x])
        return False
    return [c for c in chain if has(c)][-1]


def replay(repo: Path, log: str, tmp: Path) -> tuple[str | None, set[str]]:
    """Replay a bisect log in a fresh clone; (first bad, candidates) as git then says."""
    clone = tmp / f"replay-{time.monotonic_ns()}"
    git(repo, "clone", "-q", str(repo), str(clone))
    (tmp / "log.txt").write_text(log)
    out = subprocess.run(["git", "bisect", "replay", str(tmp / "log.txt")], cwd=clone,
                         capture_output=True, text=True).stdout
    found = re.search(rf"^({_SHA}) is the first bad commit", out, re.M)
    if found:
        return found[1], {found[1]}
    body = out.split("could be any of:", 1)[-1].split("We cannot bisect more", 1)[0]
    return None, set(re.findall(rf"^({_SHA})$", body, re.M))


def rounds_of(result) -> list[list[str]]:
    """The commits each executed round probed (recalled verdicts take no round)."""
    rounds: dict[int, list[str]] = {}
    for p in result.probes:
        if not p.cached:
            rounds.setdefault(p.round, []).append(p.commit)
    return list(rounds.values())


def assert_clean(r, before: dict, pid: int) -> None:
    assert r.snapshot() == before
    assert not list(Path(tempfile.gettempdir()).glob(f"rlbisect-{pid}-*"))


@pytest.mark.parametrize("case", sweep(range(15)))
def test_jobs_2_and_3_name_what_jobs_1_names(tiny_repo, run_cli, state_cmd, tmp_path, case):
    rng = random.Random(SEED + case)
    states, parents, culprit, first_parent = random_history(rng)
    r = tiny_repo(states, parents)
    want = r.shas[expected_culprit(parents, culprit, first_parent)]
    before = r.snapshot()
    base = [f"{r.shas[0]}..{r.shas[-1]}", "--repo", str(r.path), "--no-cache",
            *(["--first-parent"] if first_parent else [])]
    results = {}
    for jobs in (1, 2, 3):
        code, out, data = run_cli([*base, "--jobs", str(jobs), "--", *state_cmd])
        assert_clean(r, before, os.getpid())
        assert code == (0 if data["first_bad"] else 3), out
        # a monotone verdict: the commit named is the culprit, or the culprit is a candidate
        assert data["first_bad"] == want if data["first_bad"] else want in data["candidates"]
        assert replay(r.path, data["bisect_log"], tmp_path) == (
            data["first_bad"], set(data["candidates"]))
        results[jobs] = data
    one = results[1]
    for jobs in (2, 3):
        data = results[jobs]
        if "skip" not in states:   # nothing untestable: exactly the same answer
            assert data["first_bad"] == one["first_bad"] == want
        if not any(len(ps) > 1 for ps in parents):   # linear: the same candidates too
            assert (data["first_bad"], set(data["candidates"])) == (
                one["first_bad"], set(one["candidates"]))


@pytest.mark.parametrize("culprit", [1, 17, 40, 63])
def test_rounds_are_about_log_j_plus_1_of_n(tiny_repo, state_cmd, culprit):
    r = tiny_repo(["good"] * culprit + ["bad"] * (65 - culprit), dirty=False)  # 64 after GOOD
    pred = make_predicate(command=state_cmd)
    spec = f"{r.shas[0]}..{r.shas[-1]}"
    seq = bisect(r.path, spec, pred, BisectOptions(use_cache=False, verify=0))   # the search alone
    # log2 64 = 6 probes; one more when every probe said bad (culprit 1): the answer rests on
    # GOOD, which is then probed too
    endpoint = int(culprit == 1)
    assert seq.first_bad == r.shas[culprit] and len(seq.probes) == 6 + endpoint
    for jobs, most in ((2, 4), (3, 3)):   # ceil(log3 64) = 4, ceil(log4 64) = 3
        res = bisect(r.path, spec, pred, BisectOptions(jobs=jobs, use_cache=False, verify=0))
        rounds = rounds_of(res)
        assert res.first_bad == seq.first_bad and res.rounds == len(rounds)
        assert len(rounds) <= most + endpoint and all(len(p) <= jobs for p in rounds)
        assert sum(map(len, rounds)) == len(res.probes)


def test_cached_commits_take_no_slot(tiny_repo, state_cmd):
    r = tiny_repo(["good"] * 9 + ["bad"] * 23)
    pred = make_predicate(command=state_cmd)
    spec = f"{r.shas[0]}..{r.shas[-1]}"
    first = bisect(r.path, spec, pred, BisectOptions(jobs=2, verify=0))
    again = bisect(r.path, spec, pred, BisectOptions(jobs=3, verify=0))
    assert again.first_bad == first.first_bad == r.shas[9]
    # jobs 3 plans other commits than jobs 2: only those the cache lacks are run
    ran = [p.commit for p in again.probes if not p.cached]
    assert sum(map(len, rounds_of(again))) == len(ran)
    assert not set(ran) & {p.commit for p in first.probes}
    third = bisect(r.path, spec, pred, BisectOptions(jobs=3, verify=0))
    assert third.first_bad == first.first_bad and all(p.cached for p in third.probes)


@pytest.mark.parametrize("case", range(4))
def test_contradictory_verdicts_keep_the_log_valid(tiny_repo, state_cmd, tmp_path, case):
    rng = random.Random(SEED + 100 + case)
    states, parents, _, first_parent = random_history(rng, noisy=True)
    r = tiny_repo(states, parents)
    before = r.snapshot()
    res = bisect(r.path, f"{r.shas[0]}..{r.shas[-1]}", make_predicate(command=state_cmd),
                 BisectOptions(jobs=3, first_parent=first_parent, use_cache=False))
    assert res.status in ("found", "ambiguous")
    assert replay(r.path, res.bisect_log, tmp_path) == (
        res.first_bad if res.status == "found" else None, set(res.candidates))
    marked = set(re.findall(rf"^git bisect (?:good|bad|skip) ({_SHA})$", res.bisect_log, re.M))
    for p in res.probes:   # every probe is in git's log, says why it is not, or checked an endpoint
        assert p.commit in marked or "not marked" in p.reason or p.role in ("GOOD", "BAD", "verify")
    assert_clean(r, before, os.getpid())


def test_an_abort_in_a_round_stops_the_bisect(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good"] * 4 + ["200"] * 12)
    before = r.snapshot()
    code, out, data = run_cli([f"{r.shas[0]}..{r.shas[-1]}", "--repo", str(r.path),
                               "--jobs", "3", "--no-cache", "--", *state_cmd])
    assert code == 4 and data["status"] == "aborted", out
    assert "exit 200" in data["message"] and data["first_bad"] is None
    assert "abort" in [p["verdict"] for p in data["probes"]]
    assert_clean(r, before, os.getpid())


def test_a_command_that_cannot_run_aborts_after_the_check_on_good(tiny_repo, run_cli):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    code, out, data = run_cli([f"{r.shas[0]}..{r.shas[-1]}", "--repo", str(r.path), "--jobs",
                               "2", "--no-cache", "--", "no-such-command-rlbisect"])
    assert code == 4 and "bogus exit code 127 on GOOD too" in data["message"], out


class GoodAware(BasePredicate):
    """A predicate that compares against GOOD through ``setup`` (as short-run does)."""

    def __init__(self):
        self.good_paths: list[Path] = []

    def setup(self, good, checkout):
        self.good, self.checkout = good, checkout

    def identity(self) -> str:
        return f"good-aware {self.good}"

    def probe(self, worktree, commit, timeout):
        good = self.checkout()
        self.good_paths.append(good)
        same = (good / "state").read_text() == (Path(worktree) / "state").read_text()
        return Probe("good" if same else "bad", reason="same as GOOD" if same else "differs")


def test_good_is_checked_out_once_for_concurrent_probes(tiny_repo):
    r = tiny_repo(["good"] * 7 + ["bad"] * 9)
    before = r.snapshot()
    pred = GoodAware()
    res = bisect(r.path, f"{r.shas[0]}..{r.shas[-1]}", pred, BisectOptions(jobs=3, use_cache=False))
    assert res.first_bad == r.shas[7], [(p.verdict, p.reason) for p in res.probes]
    assert len(set(pred.good_paths)) == 1 and len(pred.good_paths) == len(res.probes)
    assert_clean(r, before, os.getpid())


def test_missing_ray_is_one_line_and_exit_2(tiny_repo, run_cli, state_cmd, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` now raises ImportError
    r = tiny_repo(["good", "bad"])
    code, out, data = run_cli([f"{r.shas[0]}..{r.shas[1]}", "--repo", str(r.path), "--executor",
                               "ray", "--", *state_cmd])
    assert code == 2 and data is None
    assert out.strip() == ("rlbisect run: --executor ray needs Ray, which is not installed: "
                           "pip install 'rlbisect[ray]'")


@pytest.mark.parametrize("args,message", [
    (["--executor", "slurm"], "--executor: Input should be 'local' or 'ray'"),
    (["--ray-address", "auto"], "--ray-address needs --executor ray"),
    (["--jobs", "2", "--clone-url", "file:///x"], "--clone-url needs --executor ray"),
])
def test_bad_executor_options_are_one_line_and_exit_2(tiny_repo, run_cli, state_cmd, args,
                                                       message):
    r = tiny_repo(["good", "bad"])
    code, out, _ = run_cli([f"{r.shas[0]}..{r.shas[1]}", "--repo", str(r.path), *args, "--",
                            *state_cmd])
    assert code == 2 and out.strip() == f"rlbisect run: {message}"


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_parallel_round_cleans_up(tiny_repo, tmp_path, sig, code):
    r = tiny_repo(["good"] * 8 + ["bad"] * 8)
    before = r.snapshot()
    pids = tmp_path / "pids"
    pids.mkdir()
    cmd = ["sh", "-c", f"echo $$ > {pids}/$(cat n).tmp && mv {pids}/$(cat n).tmp {pids}/$(cat n)"
                       "; sleep 60 & wait"]
    proc = subprocess.Popen([sys.executable, "-m", "rlbisect.cli.app", "run", "main~15..main",
                             "--repo", str(r.path), "--jobs", "3", "--json",
                             str(tmp_path / "partial.json"), "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    def started() -> list[Path]:   # renamed into place only once written: never half a pid
        return [p for p in pids.iterdir() if p.name.isdigit()]
    while len(started()) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the three probes never started"
        time.sleep(0.05)
    groups = [int(p.read_text()) for p in started()]
    assert all(live_members(g) for g in groups)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (out, err)
    assert "interrupted by" in out and "Traceback" not in err
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert partial["status"] == "interrupted" and partial["n_probes"] == 0
    assert all(live_members(g, settle=3.0) == [] for g in groups)
    assert_clean(r, before, proc.pid)


@pytest.mark.parametrize("jobs", [2, 3])
def test_a_merge_base_git_asks_for_is_tested_and_marked(tiny_repo, run_cli, state_cmd, tmp_path, jobs):
    # a side branch off m2, merged at the end; the fault at m4 on the mainline. A round that marks
    # side commits good makes git ask for their merge base with BAD (m2) before it goes on: that
    # answer ("a merge base must be tested") ended the bisect with exit 1 and no result
    parents = [[], [0], [1]] + [[i - 1] for i in range(3, 11)] + [[2]] + [[i - 1] for i in range(12, 17)] + [[16, 10]]
    states = ["good"] * 12 + ["bad"] * 6
    r = tiny_repo(states, parents)
    before = r.snapshot()
    code, out, data = run_cli([f"{r.shas[0]}..{r.shas[-1]}", "--repo", str(r.path), "--no-cache", "--jobs", str(jobs),
                               "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[12], out
    assert replay(r.path, data["bisect_log"], tmp_path) == (r.shas[12], {r.shas[12]})
    assert_clean(r, before, os.getpid())
