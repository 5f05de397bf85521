"""Property test: `rlbisect run` names what plain `git bisect run` names, and changes nothing.

Random histories (linear, with merges, with runs of untestable commits exiting 125), seeded.
"""

from __future__ import annotations

import random
import re
import subprocess

import pytest

from helpers import git, monotone_states, random_dag, sweep

from rlbisect.bisect.search import BisectState

SEED = 20240229


def random_history(rng: random.Random) -> tuple[list[str], list[list[int]], bool]:
    """States and parent lists for a random DAG; commit 0 is GOOD, the last commit is BAD."""
    parents, merges, reach = random_dag(rng, rng.randint(4, 40))
    _, states = monotone_states(rng, reach)
    if rng.random() < 0.2:  # a noisy, non-monotone verdict
        states[rng.randint(1, len(states) - 2)] = rng.choice(["good", "bad"])
    states[0], states[-1] = "good", "bad"
    return states, parents, merges and rng.random() < 0.4


def git_bisect_run(clone, good: str, bad: str, first_parent: bool, cmd: list[str]):
    fp = ["--first-parent"] if first_parent else []
    git(clone, "bisect", "start", *fp, bad, good)
    out = subprocess.run(["git", "bisect", "run", *cmd], cwd=clone, capture_output=True,
                         text=True).stdout
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", out, re.M)
    if found:
        return found[1], [found[1]]
    body = out.split("could be any of:", 1)[1].split("We cannot bisect more", 1)[0]
    return None, re.findall(r"^([0-9a-f]{40})$", body, re.M)


@pytest.mark.parametrize("case", sweep(range(24), fast=4))
def test_same_answer_as_git_bisect_run(tiny_repo, run_cli, state_cmd, tmp_path, case):
    rng = random.Random(SEED + case)
    states, parents, first_parent = random_history(rng)
    r = tiny_repo(states, parents)
    good, bad = r.shas[0], r.shas[-1]
    clone = tmp_path / "clone"
    git(r.path, "clone", "-q", str(r.path), str(clone))
    want_first, want_candidates = git_bisect_run(clone, good, bad, first_parent, state_cmd)

    before = r.snapshot()
    args = [f"{good}..{bad}", "--repo", str(r.path), "--no-cache"]
    code, out, data = run_cli([*args, *(["--first-parent"] if first_parent else []),
                               "--", *state_cmd])
    assert r.snapshot() == before
    assert data["first_bad"] == want_first, out
    assert set(data["candidates"]) == set(want_candidates)
    assert code == (0 if want_first else 3)

    # The pure search module, fed the same verdicts, agrees with git on the candidates.
    hist = {sha: tuple(ps) for sha, ps in zip(r.shas, [[r.shas[p] for p in ps] for ps in parents])}
    mirror = BisectState(hist, {good}, bad, first_parent)
    for p in data["probes"]:
        mirror.mark(p["commit"], p["verdict"])
    assert set(mirror.candidates()) == set(want_candidates)


@pytest.mark.parametrize("case", sweep(range(8), fast=2))
def test_when_bad_passes_git_blames_a_commit_and_rlbisect_refuses(tiny_repo, run_cli, state_cmd,
                                                                 tmp_path, case):
    """git trusts the user's BAD; on a range where the predicate passes everywhere (skips aside)
    it names BAD or lists candidates. rlbisect probes BAD, sees it pass, and names nobody."""
    rng = random.Random(SEED + 1000 + case)
    parents, merges, reach = random_dag(rng, rng.randint(4, 30))
    states = ["good" if rng.random() < 0.85 else "skip" for _ in reach]
    states[0] = states[-1] = "good"
    r = tiny_repo(states, parents)
    good, bad = r.shas[0], r.shas[-1]
    clone = tmp_path / "clone"
    git(r.path, "clone", "-q", str(r.path), str(clone))
    blamed, candidates = git_bisect_run(clone, good, bad, False, state_cmd)
    assert blamed == bad or bad in candidates            # git blames what it was told is bad
    before = r.snapshot()
    code, out, data = run_cli([f"{good}..{bad}", "--repo", str(r.path), "--no-cache", "--",
                               *state_cmd])
    assert code == 5 and data["first_bad"] is None and "is the first bad commit" not in out
    assert r.snapshot() == before
