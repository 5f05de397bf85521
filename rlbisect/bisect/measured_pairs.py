"""What runs on the same seed say about the culprit, on a trainer that may be deterministic.

Pure: numpy only. The measured search runs a commit's n-th run on seed n, the same at every commit.
On a deterministic trainer a run is a function of the code and its seed, so two runs on one seed
are bit-identical exactly when nothing between their commits changed what that run computes. That
is evidence the values alone do not carry, and a trap if ignored: a repeated run is not a new draw
(counted twice, it overstates what is known; docs/noisy.md has the measurement). So:

* :func:`distinct` keeps each (seed, value) once, at its first position, for the value models;
* :func:`pair_loglik` scores every hypothesis on which pairs of runs repeat.

Model. Positions ``0..n``; a pair is two consecutive runs of one seed, at ``a <= b``. Commit ``c``
(``1..n``) changes the random stream with probability ``rho`` (a benign edit to numerics), each
independently. The culprit ``k`` changes a seed's run ("touches" it) with probability ``1 - u``,
independently per seed: most faults touch every run (``u`` = 0), a fault in a rare path leaves
some alone. Nothing else differs, except a run that is not reproducible at all (probability
``delta``: a nondeterministic kernel). A pair repeats iff its interval ``(a, b]`` holds no stream
change, it does not straddle ``k`` or is untouched, and no nondeterminism; ``rho``, ``u`` and
``delta`` are unknown and integrated over a grid with :data:`U_PRIOR`, :data:`RHO_GRID` and
:data:`DELTA_PRIOR`.

A repeating pair proves no stream change in ``(a, b]`` (whatever ``k``), and costs each culprit
it straddles a factor ``u``. A pair that differs is scored when at most one commit ``f`` of its
interval is not already proven unchanged: with none, only the culprit (or nondeterminism) can
explain it; with one, a stream change at ``f`` can, once, for every such pair at ``f`` together.
Pairs with two or more unproven commits are left out: what they say depends on stream changes
shared between pairs, and leaving them out loses evidence but never invents it. On a trainer
whose every run differs (not deterministic, or reseeding every commit) nothing repeats and every
hypothesis scores the same: the search is the values' alone.

A repeat is two runs with the same value *and* the same record (``prints``: a fingerprint of all a
run logged, where known). The value alone is not enough: a metric with few levels (a pass rate over
30 tasks) gives two different runs the same value often, and a repeat read where there is none
proves a stream unchanged and weighs against the culprit it straddles (docs/noisy.md measures the
wrong answers). Runs alike in value and unlike in record are neither a repeat nor a difference:
the pair is left out, and the later run is no new draw either (it may be a repeat whose record
holds a number that is not reproducible). Where the record cannot tell runs apart at all (one
coarse number), two runs on different seeds, which are never repeats, come out alike too:
:func:`coincide` sees it, and then no pair is read. :func:`seed_blind` is the extreme: every
commit gives one run whatever the seed, and the search gives no answer.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

U_PRIOR = {0.0: 0.75, 0.15: 0.1, 0.35: 0.1, 0.6: 0.05}   #: untouched share of runs
RHO_GRID = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)                         #: stream changes a commit, even
DELTA_PRIOR = {1e-4: 0.6, 1e-2: 0.3, 0.1: 0.1}                                 #: a run not reproducible

Run = tuple[int, int | None, float]   # (position, seed or None, value)
Prints = Sequence[str | None] | None   # each run's record fingerprint, where known
Pair = tuple[int, int, bool | None]     # (a, b, repeated: None where the records tell otherwise)


def distinct(runs: list[Run]) -> np.ndarray:
    """Mask of the runs that are new draws: a finite value seen before on the same seed (at a
    position no later) is a repeat, kept out of the value models."""
    keep = np.ones(len(runs), bool)
    seen: set[tuple[int, float]] = set()
    for i in sorted(range(len(runs)), key=lambda i: (runs[i][0], i)):
        pos, seed, v = runs[i]
        if seed is None or not np.isfinite(v):
            continue
        keep[i] = (seed, v) not in seen
        seen.add((seed, v))
    return keep


def pairs(runs: list[Run], prints: Prints = None) -> list[Pair]:
    """Consecutive finite runs of each seed in position order -> (a, b, repeated), where repeated
    is None for runs alike in value whose ``prints`` differ (see the module)."""
    chains: dict[int, list[tuple[int, float, str | None]]] = {}
    for i, (pos, seed, v) in enumerate(runs):
        if seed is not None and np.isfinite(v):
            chains.setdefault(seed, []).append((pos, v, prints[i] if prints else None))
    out = []
    for chain in chains.values():
        chain.sort(key=lambda r: r[0])
        out += [(a, b, _alike(va, vb, pa, pb)) for (a, va, pa), (b, vb, pb) in zip(chain, chain[1:])]
    return out


def coincide(runs: list[Run], prints: Prints = None) -> bool:
    """Whether two runs on different seeds gave the same score and record: then the record does not
    tell runs apart (one coarse number), and an equal pair on one seed may be chance, not a repeat."""
    seeds: dict[tuple, int] = {}
    for i, (_, seed, v) in enumerate(runs):
        if seed is not None and np.isfinite(v):
            if seeds.setdefault((v, prints[i] if prints else None), seed) != seed:
                return True
    return False


def _alike(va: float, vb: float, pa: str | None, pb: str | None) -> bool | None:
    if va != vb:
        return False
    return None if pa is not None and pb is not None and pa != pb else True


def proven(ps: list[Pair], n: int) -> np.ndarray:
    """``[c]``: commit c (1..n) is proven not to change the random stream (one of the pairs ``ps``
    repeats across it)."""
    out = np.zeros(n + 1, bool)
    for a, b, same in ps:
        if same:
            out[a + 1:b + 1] = True
    return out


def fresh_seed(runs: list[Run], n: int, position: int) -> int:
    """The smallest seed not yet run anywhere in ``position``'s block of commits proven to share the
    random stream: there a seed already run would repeat, not draw. Outside any block that is the
    commit's own next seed, the n-th run on seed n, paired with its neighbours'. Runs alike in value
    count as repeats here, whatever their records: a seed that only gives a value seen would not draw."""
    same = proven(pairs(runs), n)
    lo, hi = position, position
    while lo > 0 and same[lo]:
        lo -= 1
    while hi < n and same[hi + 1]:
        hi += 1
    used = {seed for pos, seed, _ in runs if lo <= pos <= hi}
    return next(s for s in range(len(used) + 1) if s not in used)


def pair_loglik(runs: list[Run], n: int, prints: Prints = None) -> np.ndarray:
    """Log-likelihood of the repeats for NONE (index 0) and each culprit 1..n, up to a constant
    shared by all (see the module)."""
    ps = [p for p in pairs(runs, prints) if p[2] is not None]
    if not any(same for *_, same in ps) or coincide(runs, prints):
        return np.zeros(n + 1)   # no repeat (no sign the trainer is deterministic), or no telling one
    kept = proven(ps, n)
    k = np.arange(n + 1)[:, None]    # hypothesis index; 0 (NONE) is straddled by no pair
    straddles = lambda a, b: ((k > a) & (k <= b) & (k > 0))[:, 0]   # noqa: E731

    alike = sum((straddles(a, b) for a, b, same in ps if same), np.zeros(n + 1))
    blind, blind_out = np.zeros(n + 1), np.zeros(n + 1)   # differing pairs with every commit proven
    groups: dict[int, list[np.ndarray]] = {}             # differing pairs with one unproven commit f
    wider: set[frozenset[int]] = set()                   # the unproven commits of the others
    for a, b, same in ps:
        if same:
            continue
        free = [c for c in range(a + 1, b + 1) if not kept[c]]
        s = straddles(a, b)
        if not free:
            blind, blind_out = blind + s, blind_out + ~s
        elif len(free) == 1:
            groups.setdefault(free[0], []).append(s)
        else:
            wider.add(frozenset(free))
    # each smallest such set held a stream change (or the culprit: taken as a change, which only
    # makes rho larger and the groups' evidence weaker); without them, rho would be learned from
    # the commits proven unchanged alone, too small
    changed = [len(f) for f in wider if not any(g < f for g in wider) and not f & groups.keys()]

    u = np.array(list(U_PRIOR))[:, None, None, None]
    rho = np.array(RHO_GRID)[None, :, None, None]
    delta = np.array(list(DELTA_PRIOR))[None, None, :, None]
    log_prior = (np.log(list(U_PRIOR.values()))[:, None, None, None] - np.log(len(RHO_GRID))
                 + np.log(list(DELTA_PRIOR.values()))[None, None, :, None])
    with np.errstate(divide="ignore", invalid="ignore"):
        log_u, log_touch, log_delta = np.log(u), np.log(1 - u + u * delta), np.log(delta)
        untouched = np.where(alike > 0, log_u * alike, 0.0)   # u = 0 forbids a repeat, nothing else
        ll = kept[1:].sum() * np.log(1 - rho) + untouched + log_touch * blind + log_delta * blind_out
        ll = ll + sum(np.log(1 - (1 - rho) ** size) for size in changed)
        for members in groups.values():
            s = np.sum(members, axis=0)
            off = len(members) - s
            ll = ll + np.logaddexp(np.log(rho), np.log(1 - rho) + log_touch * s + log_delta * off)
        total = log_prior + ll
    top = total.max(axis=(0, 1, 2))
    return top + np.log(np.exp(total - top).sum(axis=(0, 1, 2)))


def seed_blind(positions: Sequence[int], seeds: Sequence[int | None], prints: Prints,
               values: Sequence[float] | None = None) -> int | None:
    """How many positions ran on two seeds or more, when every such position (two at least) gave
    one run for all its seeds, by its record or by its value (a record can hold a number that is
    never reproducible, a memory reading): the seed does not reach the run (a training script
    that ignores ``--seed``), so runs at a commit are not draws and the value models do not apply.
    Else None. A coarse record (one number of few levels) could look so by chance; it takes every
    commit with two seeds or more agreeing (three such commits where only values agree), at the
    point an answer would be given."""
    records: dict[int, dict[int, tuple[str, float]]] = {}
    for i, (pos, seed, fp) in enumerate(zip(positions, seeds, prints or ())):
        if seed is not None and fp is not None:
            records.setdefault(pos, {})[seed] = (fp, float("nan") if values is None else values[i])
    multi = [list(r.values()) for r in records.values() if len(r) > 1]
    same_record = [len({fp for fp, _ in runs}) == 1 for runs in multi]
    same_value = [len(kept := {v for _, v in runs}) == 1 and bool(np.isfinite(list(kept)).all()) for runs in multi]
    # a metric of few levels gives two seeds one value by chance more often than one record: three commits
    enough = len(multi) > 1 if all(same_record) else len(multi) > 2
    return len(multi) if enough and all(r or v for r, v in zip(same_record, same_value)) else None
