"""Helpers the bisect tests share: random commit DAGs and live process-group members."""

from __future__ import annotations

import random
import time
from pathlib import Path


def random_dag(rng: random.Random, n: int) -> tuple[list[list[int]], bool, list[set[int]]]:
    """(parents, merges, reach): a random DAG of about `n` commits, linear or with merges, ending
    in one tip that merges every open branch; reach[i] is the set of i's ancestors (i included)."""
    merges = rng.random() < 0.6
    parents: list[list[int]] = [[]]
    heads = [0]
    for i in range(1, n):
        first = rng.choice(heads) if merges else i - 1
        ps = [first]
        others = [h for h in heads if h != first]
        if merges and others and rng.random() < 0.3:
            ps.append(rng.choice(others))
            heads.remove(ps[1])
        if merges and rng.random() < 0.3:
            heads.append(i)
        else:
            heads = [h for h in heads if h != first] + [i]
        parents.append(ps)
    if len(heads) > 1:
        parents.append(list(heads))
    reach: list[set[int]] = []
    for i in range(len(parents)):
        reach.append({i}.union(*(reach[p] for p in parents[i])))
    return parents, merges, reach


def monotone_states(rng: random.Random, reach: list[set[int]]) -> tuple[int, list[str]]:
    """(culprit, states): bad exactly where the culprit is an ancestor, plus (often) a run of
    untestable commits, frequently right at the culprit where git can only list candidates."""
    n = len(reach)
    culprit = rng.randint(1, n - 1)
    states = ["bad" if culprit in reach[i] else "good" for i in range(n)]
    if rng.random() < 0.6:
        a = min(culprit, n - 2) if rng.random() < 0.4 else rng.randint(1, n - 2)
        for i in range(a, min(n - 1, a + rng.randint(1, 5))):
            states[i] = "skip"
    return culprit, states


def live_members(pgid: int, settle: float = 0.0) -> list[int]:
    """Processes of group `pgid` that are not zombies (PID 1 here may not reap orphans); with
    `settle`, wait up to that long for them to go (a SIGKILL takes a moment)."""
    deadline = time.monotonic() + settle
    while True:
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError, ValueError):   # the process exited while we looked
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(d.name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)
