"""Running the predicate for the driver: rounds of probes, the cache, the record, and the checks
made once an answer stands (``--verify`` and diagnose).

One :class:`Prober` per bisect. A round recalls what the cache agrees on (no slot is spent on it),
runs the rest at once on the executor, each in its own slot of the run's sandbox, caches each result
as it arrives, and records every probe in the result. Cached verdicts that disagree are probed
again, and the probe says so.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from functools import partial
from typing import Sequence

from rlbisect._proc.signals import SignalTrap
from rlbisect.bisect.cache import ProbeCache, flaky_identity
from rlbisect.bisect.diagnose import compare
from rlbisect.bisect.executors import Checkout, Executor
from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.predicates import Predicate, Probe
from rlbisect.bisect.predicates.command import judged_on_good
from rlbisect.bisect.report import BisectResult, ProbeRecord, Progress
from rlbisect.errors import Cause, GitError, Status, Verdict
from rlbisect.git.repo import Repo
from rlbisect.git.sandbox import Sandbox

#: ``--verify`` by default, from the bisect's median probe: (under this many seconds, re-runs).
#: A flaky predicate slips past N re-runs of both commits rarely (30% flaky: 6% at N=1, under 1%
#: at N=3), and re-runs that cost seconds are cheap insurance; minutes are the user's to spend.
VERIFY_DEFAULT = ((1.0, 3), (10.0, 1))
#: what a round ran: (commit, probe, our overhead), in the order asked
Runs = list[tuple[str, Probe, float]]


class Prober:
    """How one bisect runs its predicate (see the module docstring)."""

    def __init__(self, user: Repo, sandbox: Sandbox, predicate: Predicate, executor: Executor,
                 options: BisectOptions, result: BisectResult, trap: SignalTrap, progress: Progress,
                 recall: bool):
        self.user, self.sandbox, self.predicate, self.executor = user, sandbox, predicate, executor
        self.options, self.result, self.trap, self.progress = options, result, trap, progress
        self.recall = recall     # False: every run is fresh evidence (a noisy predicate)
        self.cache = ProbeCache.for_git_dir(user.common_dir, options.use_cache)
        self.identity = ""       # known once the predicate is set up (short runs name GOOD in it)
        self.first_run = True    # git checks a 126/127 on GOOD at its first run only

    def tree(self, sha: str) -> str:
        if sha not in self.result.commits:
            self.result.commits[sha] = self.user.info(sha)
        return self.result.commits[sha].tree

    def store(self, commit: str, probe: Probe) -> None:
        key = self.identity if self.recall else flaky_identity(self.identity)
        self.cache.put(self.tree(commit), commit, key, probe)

    def record(self, commit: str, probe: Probe, cached: bool, overhead: float, role: str = "",
               recorded: str = "") -> ProbeRecord:
        res = self.result
        role = role or {res.good: "GOOD", res.bad: "BAD"}.get(commit, "")
        rec = ProbeRecord(len(res.probes) + 1, commit, probe.verdict, probe.seconds, probe.values,
                          probe.reason, cached, res.commits[commit].subject, self.tree(commit),
                          overhead, probe.output, res.rounds, role, probe.detail, probe.cause, recorded)
        if res.terms is not None:     # a fix search: git's good is OLD, its bad NEW
            rec.term = {Verdict.GOOD: res.terms[0], Verdict.BAD: res.terms[1]}.get(probe.verdict, "")
        res.probes.append(rec)
        self.progress.probe(rec)
        return rec

    # -- one round --------------------------------------------------------------------------

    def round(self, picks: list[str]) -> list[tuple[str, Probe]]:
        """Probe ``picks`` (recalling what the cache agrees on); record and return the outcomes."""
        recalled = {c: self.cache.recall(self.tree(c), self.identity) for c in picks} if self.recall else {}
        known: list[tuple[str, Probe]] = []
        for c, r in recalled.items():
            if r.probe is not None:
                self.record(c, r.probe, True, 0.0, recorded=r.recorded)
                known.append((c, r.probe))
        if known:   # no slot for what the cache knows: mark it, then plan again
            return known
        self.result.rounds += 1
        self.progress.status(f"round {self.result.rounds}: probing {' '.join(c[:10] for c in picks)}")
        fresh = self.execute(picks)
        if self.first_run:
            self.first_run = False
            fresh = self._check_exit_codes(fresh)
        out = []
        for c, probe, overhead in fresh:
            if c in recalled and recalled[c].disagree:
                probe.reason += (f"; probed again: its cached verdicts disagree "
                                 f"({' and '.join(recalled[c].disagree)}), the predicate may be flaky")
            self.record(c, probe, False, overhead)
            out.append((c, probe))
        return out

    def execute(self, commits: list[str], store: bool = True) -> Runs:
        """Run the predicate on ``commits`` at once, each in its own slot (a commit named twice,
        as ``--flaky --jobs`` may, runs twice) -> [(commit, probe, our overhead)] in their order."""
        t0, out, futures = time.perf_counter(), {}, {}
        runs = Counter(p.commit for p in self.result.probes if p.role not in ("verify", "confirm", "per-commit"))
        try:
            for slot, c in enumerate(commits):
                co = Checkout(str(self.user.root), self.options.clone_url, self.result.good,
                              local=partial(self.sandbox.checkout, c, f"probe{slot}"))
                # a predicate that takes a seed per run gets the commit's next one
                pred = self.predicate.bind(c, runs[c]) if hasattr(self.predicate, "bind") else self.predicate
                runs[c] += 1
                futures[self.executor.submit(c, co, pred, self.options.timeout)] = slot
            pending: set[Future] = set(futures)
            while pending:
                done, pending = wait_futures(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    slot, probe = futures[f], f.result()
                    out[slot] = (commits[slot], probe, max(0.0, time.perf_counter() - t0 - probe.seconds))
                    if store and not (self.first_run and probe.confirm_on_good):
                        self.store(commits[slot], probe)
                self.trap.check()
        finally:
            if pending := {f for f in futures if not f.done()}:
                self.executor.stop(pending)   # a signal or an error: end them before cleanup
        return [out[slot] for slot in range(len(commits))]

    def _check_exit_codes(self, fresh: Runs) -> Runs:
        """git's check at its first run: a 126/127 that GOOD gives too means the command cannot
        run at all, so those bad verdicts become an abort. GOOD's run is kept as evidence
        (returned with the others)."""
        suspect = [p.confirm_on_good and p.verdict is Verdict.BAD for _, p, _ in fresh]
        extra = []
        if any(suspect) and all(c != self.result.good for c, _, _ in fresh):
            extra = self.execute([self.result.good], store=False)
            fresh = [(c, judged_on_good(p, extra[0][1]) if s else p, o) for (c, p, o), s in zip(fresh, suspect)]
        runs = fresh + extra
        for c, p, _ in runs:
            if p.confirm_on_good:
                self.store(c, p)
        return runs

    # -- once an answer stands ----------------------------------------------------------------

    def verify(self, culprit: str, parents: Sequence[str]) -> tuple[Status, str] | None:
        """``--verify N``: run the culprit and its first parent N more times each -> what disagreed
        with the verdicts the answer rests on (bad at the culprit, good at its parents), or None.
        A parent git never ran (an ancestor of a good commit, good by git's assumption) runs at
        least once, and so does every other parent of a merge (GOOD included) unless the search
        follows first parents."""
        times = self.options.verify
        if times is None:      # the default: once, when a probe is cheap
            seconds = [p.seconds for p in self.result.probes]
            median = statistics.median(seconds) if seconds else float("inf")
            times = next((n for limit, n in VERIFY_DEFAULT if median < limit), 0)
        # git takes a commit it never ran for good when it is an ancestor of a good one: the answer
        # rests on that, so the parent runs once even where verifying is off
        parent, good = parents[0], self.result.good
        unrun = {q for q in parents if not any(p.commit == q for p in self.result.probes)}
        assumed = unrun - ({good} & {parent})   # GOOD as the first parent: the user's mark, as git reads it
        rounds = [[culprit, parent]] * times or ([[parent]] if parent in assumed else [])
        # with --first-parent a merge is the answer whatever its side branch held
        rounds += [[q] for q in parents[1:] if q in assumed and not self.result.first_parent]
        for i, commits in enumerate(rounds):
            self.trap.check()
            self.progress.status(f"verify {i + 1}/{len(rounds)}: {' and '.join(c[:10] for c in commits)} again")
            for c, probe, overhead in self.execute(commits):
                self.record(c, probe, False, overhead, role="verify")
                want = Verdict.BAD if c == culprit else Verdict.GOOD
                if probe.verdict is want:
                    continue
                if c == good and c in unrun and probe.verdict is Verdict.BAD:
                    return Status.GOOD_FAILS, (
                        f"GOOD ({good[:12]}) fails ({probe.reason}); it is a parent of the commit git "
                        f"named ({culprit[:12]}), so the regression is older than the range")
                if c in assumed and probe.verdict is Verdict.BAD:
                    return Status.UNSURE, (
                        f"{c[:12]}, a parent of the commit git named ({culprit[:12]}), was never "
                        "run: git took it for good, as an ancestor of a good commit, but it is bad "
                        f"({probe.reason}). The fault is older than that good commit and came back "
                        "with a branch merged into the range; --first-parent finds the merge")
                if c in assumed:
                    continue   # a skip at a commit outside the search: nothing against the answer
                return Status.UNSURE, (
                    f"the predicate is not deterministic: {c[:12]} was {want} and is now "
                    f"{probe.verdict} ({probe.reason}); use --flaky, or --no-cache if something "
                    "it reads outside the repository changed")
        return None

    def confirm(self, culprit: str, parent: str) -> str | None:
        """When the verdicts the answer rests on were tests at the seed spread (runs unlike GOOD's
        on the same seeds), the bracket is judged directly: the culprit's runs against its parent's,
        on fresh seeds at both. A wrong step taken anywhere in the search leaves the named commit
        and its parent on the same side, so the two look alike; the runs the search already made
        were chosen by it (and when the parent is GOOD, GOOD's few runs, shared by every probe,
        made every verdict). -> why the answer does not stand, or None."""
        next_to_good = parent == self.result.good
        judged = [p for p in self.result.probes if p.commit == (culprit if next_to_good else parent)
                  and p.verdict is (Verdict.BAD if next_to_good else Verdict.GOOD)]
        check = getattr(self.predicate, "confirm", None)
        if check is None or self.executor.remote or not judged or judged[-1].detail.get("reproduced") is not False:
            return None
        self.trap.check()
        self.progress.status(f"confirm: {culprit[:10]} against its parent {parent[:10]}, on fresh seeds")
        slots = {parent: "probe0", culprit: "probe1"}
        try:
            probe = check(culprit, parent, lambda c: self.sandbox.checkout(c, slots[c]), self.options.timeout)
        except (GitError, OSError) as e:     # the answer then stands on nothing more: withdrawn
            probe = Probe(Verdict.SKIP, reason=f"could not check out: {e}", cause=Cause.MACHINERY)
        probe.reason = f"against {'GOOD' if next_to_good else 'its parent ' + parent[:10]} on fresh seeds: {probe.reason}"
        self.record(culprit, probe, False, 0.0, role="confirm")
        if probe.verdict is Verdict.BAD:
            return None
        why = ("it was judged against GOOD's few runs, shared by every probe" if next_to_good else "the parent's "
               "good verdict was a test at the seed spread, so a wrong step may have been taken anywhere")
        return (f"{culprit[:12]} was named, but its runs are not worse than {'GOOD' if next_to_good else 'its parent'}'s "
                f"({probe.reason}). Its runs were unlike GOOD's on the same seeds and {why}; "
                "--flaky with a --metric pools the runs across commits instead (docs/noisy.md)")

    def diagnose(self, first_bad: str, parent: str | None) -> dict:
        """Values at the first bad commit and its first parent (probed, uncounted, if need be)."""
        known = {p.commit: p for p in self.result.probes if p.verdict in (Verdict.GOOD, Verdict.BAD)}
        bad_probe = known.get(first_bad)
        if parent is None or (bad_probe is not None and set(bad_probe.values) <= {"exit_code"}):
            return {}   # an exit code says nothing more: not worth another (maybe hour-long) run

        def measured(sha: str) -> tuple[dict, str]:
            if sha in known:
                return known[sha].values, known[sha].verdict
            probe = self.cache.get(self.tree(sha), self.identity)
            if probe is None:
                self.trap.check()
                self.progress.status(f"diagnose: probing {sha[:10]} {self.result.commits[sha].subject}")
                probe = self.execute([sha])[0][1]
            return probe.values, probe.verdict
        (pv, pverdict), (bv, bverdict) = measured(parent), measured(first_bad)
        return {"parent": parent, "parent_verdict": pverdict, "first_bad": first_bad,
                "first_bad_verdict": bverdict, "rows": compare(pv, bv)}
