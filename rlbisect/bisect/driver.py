"""The one bisect loop: git, the cache, the executor, interruption and cleanup, for every strategy.

A round: the strategy (:mod:`rlbisect.bisect.strategies`) names the commits to probe; verdicts
the cache knows are recalled (no slot is spent on them: they are marked and the round is planned
again); the rest run at once on the executor, each in its own slot of the run's sandbox
(:mod:`rlbisect.git.sandbox`); each result is cached as it arrives, so a stopped bisect re-runs
nothing that finished; the strategy turns the verdicts into marks for the real ``git bisect``.
When the strategy has nothing left to probe, it concludes from the verdicts and git's state.

Signals (SIGINT, SIGTERM, SIGHUP) only set a flag: running probes are stopped (their process
groups killed), the sandbox is removed, then :class:`~rlbisect.errors.Interrupted` is raised
carrying the partial result, so a git command is never cut in half by us.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from functools import partial
from pathlib import Path

from rlbisect.bisect.cache import ProbeCache, flaky_identity
from rlbisect.bisect.diagnose import compare
from rlbisect.bisect.executors import Checkout, Executor, NodeOnly, make_executor
from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.predicates import Predicate, Probe
from rlbisect.bisect.predicates.command import judged_on_good
from rlbisect.bisect.report import BisectResult, ProbeRecord, Progress
from rlbisect._proc.client import close_private
from rlbisect._proc.signals import SignalTrap, Stopped
from rlbisect.bisect.strategies import Strategy, make_strategy
from rlbisect.errors import Cause, GitError, Interrupted, Status, Verdict
from rlbisect.git.repo import Repo
from rlbisect.git.sandbox import Sandbox, Step


def bisect(repo: str | Path, range_spec: str, predicate: Predicate,
           options: BisectOptions | None = None, *, strategy: Strategy | None = None,
           executor: Executor | None = None, progress: Progress | None = None) -> BisectResult:
    """Bisect ``GOOD..BAD`` in ``repo`` with ``predicate``; the repository is only read.

    Raises :class:`~rlbisect.errors.InputError` for bad input (nothing ran) and
    :class:`~rlbisect.errors.Interrupted` (with the partial result) after cleanup on a signal.
    """
    t_start = time.perf_counter()
    options = options or BisectOptions()
    user = Repo.open(repo)
    good, bad = user.resolve_range(range_spec)
    strategy = strategy or make_strategy(options)
    predicate.preflight(user, bad)   # input the probes could never use: refused now
    first_parent = options.first_parent or strategy.first_parent_only
    history, commits = user.history(good, bad, first_parent)
    result = BisectResult(good, bad, strategy=strategy.name, first_parent=first_parent,
                          history=history, commits=commits)
    executor = executor or make_executor(options)
    executor.open()   # before the trap: ray.init installs its own SIGTERM handler
    try:
        with SignalTrap() as trap, Sandbox(user) as sandbox:
            _Run(user, sandbox, predicate, strategy, executor, options, result, trap,
                 progress or Progress()).go(t_start)
    finally:
        executor.close()
        close_private()          # the fork server this run started for its probes, if any
    result.total_seconds = time.perf_counter() - t_start
    if trap.signum is not None:
        result.status, result.signum = Status.INTERRUPTED, trap.signum
        result.message = f"interrupted by {signal.Signals(trap.signum).name}"
        raise Interrupted(trap.signum, result)
    return result


class _Run:
    """The state of one bisect while it runs."""

    def __init__(self, user: Repo, sandbox: Sandbox, predicate: Predicate, strategy: Strategy,
                 executor: Executor, options: BisectOptions, result: BisectResult,
                 trap: SignalTrap, progress: Progress):
        self.user, self.sandbox, self.predicate, self.strategy = user, sandbox, predicate, strategy
        self.executor, self.options, self.result, self.trap = executor, options, result, trap
        self.progress = progress
        self.cache = ProbeCache.for_git_dir(user.common_dir, options.use_cache)
        self.first_run = True   # git checks a 126/127 on GOOD at its first run only
        self.good_lock = threading.Lock()
        self.good_tree: Path | None = None

    # -- the loop ---------------------------------------------------------------------------

    def go(self, t_start: float) -> None:
        res, strategy = self.result, self.strategy
        strategy.start(res.history, res.good, res.bad, res.first_parent)
        self._setup_predicate()
        res.predicate = self.identity = self.predicate.identity()
        ended = "found"      # how the search ended, for the strategy's report
        try:
            step = self.sandbox.bisect_start(res.good, res.bad, res.first_parent)
            res.setup_seconds = time.perf_counter() - t_start
            if not strategy.recall:
                self._replay_recorded_runs()
            last = self._search(step)
            if last is not None:
                self._conclude(last)
            else:
                ended = "aborted" if res.status is Status.ABORTED else "stopped"
        except Stopped:
            res.status, ended = Status.INTERRUPTED, "interrupted"
        except GitError:
            if self.trap.signum is None:
                raise
            res.status, ended = Status.INTERRUPTED, "interrupted"   # git killed by the same Ctrl-C
        finally:
            res.bisect_log = self.sandbox.bisect_log()
        if ended != "found":
            res.candidates, res.extra = strategy.candidates(), strategy.report(ended)

    def _search(self, step: Step) -> Step | None:
        """Rounds until the strategy has nothing left to probe -> git's last state; None when
        the predicate aborted or cannot run here (the result says why)."""
        res, strategy = self.result, self.strategy
        while picks := strategy.plan(step):
            self.trap.check()
            done = self._round(picks)
            self.trap.check()   # an interrupted round is neither marked nor concluded
            aborted = next(((c, p) for c, p in done if p.verdict is Verdict.ABORT), None)
            if aborted is not None:
                res.status = Status.ABORTED
                res.message = (f"predicate aborted the bisect at {aborted[0][:12]}: "
                               f"{aborted[1].reason} (exit codes >= 128 abort, as in git bisect run)")
                return None
            for commit, verdict in strategy.observe([(c, p.verdict) for c, p in done]):
                step = self.sandbox.mark(commit, verdict)
            for rec in res.probes[-len(done):]:
                if rec.commit in strategy.dropped:
                    rec.reason += "; not marked: no longer a candidate after this round's other marks"
            if (why := self._hopeless()) is not None:
                res.status = Status.AMBIGUOUS
                res.message = (f"the first {len(res.probes)} probes were all skipped: {why}; "
                               "stopped early, the predicate cannot run here (see its output)")
                return None
        return step

    def _hopeless(self) -> str | None:
        """The reason, when the first probes (3 or more) all skipped for one reason of ours: the
        adapter or runner missing, the checks unable to start. Not a command's own exit 125 or
        a timeout: those can hold for a stretch of history and end."""
        fresh = [p for p in self.result.probes if not p.cached]
        ours = {Cause.CANNOT_RUN, Cause.MACHINERY}
        reasons = {p.reason for p in fresh}
        if len(fresh) < 3 or len(reasons) != 1 or any(p.cause not in ours for p in fresh):
            return None
        return reasons.pop()

    def _conclude(self, step: Step) -> None:
        res, strategy = self.result, self.strategy
        for commit, verdict in strategy.final_marks():
            step = self.sandbox.mark(commit, verdict)
        end = strategy.conclude(step)
        res.status, res.first_bad, res.candidates = end.status, end.first_bad, end.candidates
        res.message, res.extra = end.message, end.extra
        codes = {p.values.get("exit_code") for p in res.probes}
        if res.status is Status.GOOD_FAILS and len(codes) == 1 and None not in codes:
            res.message += f" (exit {codes.pop():g} at every commit probed)"
        if res.status is Status.FOUND and self.options.diagnose is not False and strategy.recall:
            self._diagnose()

    def _setup_predicate(self) -> None:
        """A predicate that compares against GOOD gets GOOD's id and a way to check it out
        (once, in the sandbox; on a Ray node, the task checks it out there)."""
        setup = self.predicate.setup
        if self.executor.remote:
            setup(self.result.good, NodeOnly())
            return

        def checkout_good() -> Path:
            with self.good_lock:
                if self.good_tree is None:
                    self.good_tree = self.sandbox.checkout(self.result.good, slot="good")
            return self.good_tree
        setup(self.result.good, checkout_good)

    def _replay_recorded_runs(self) -> None:
        """Earlier ``--flaky`` runs of this predicate on the range's trees are evidence too."""
        trees = {self.result.commits[sha].tree: sha for sha, _ in reversed(self.result.history)}
        for row in self.cache.runs(flaky_identity(self.identity), set(trees)):
            sha = row["commit"] if row.get("commit") in self.result.commits else trees[row["tree"]]
            probe = Probe(Verdict(row["verdict"]), dict(row.get("values", {})), row.get("reason", ""),
                          float(row.get("seconds", 0.0)), output=row.get("output", ""))
            self._record(sha, probe, True, 0.0)
            self.strategy.replay([(sha, probe.verdict)])

    # -- one round --------------------------------------------------------------------------

    def _round(self, picks: list[str]) -> list[tuple[str, Probe]]:
        """Probe ``picks`` (recalling what the cache knows); record and return the outcomes."""
        recalled = {c: self.cache.get(self._tree(c), self.identity) for c in picks} \
            if self.strategy.recall else {}
        known = [(c, p) for c in picks if (p := recalled.get(c)) is not None]
        if known:   # no slot for what the cache knows: mark it, then plan again
            for c, p in known:
                self._record(c, p, True, 0.0)
            return known
        self.result.rounds += 1
        left = len(self.strategy.candidates())
        self.progress.status(f"round {self.result.rounds}: probing "
                             f"{' '.join(c[:10] for c in picks)}"
                             + (f" ({left} candidates left)" if left else ""))
        fresh = self._execute(picks)
        if self.first_run:
            self.first_run = False
            fresh.update(self._check_exit_codes(fresh))
        out = []
        for c, (probe, overhead) in fresh.items():
            self._record(c, probe, False, overhead)
            out.append((c, probe))
        return out

    def _execute(self, commits: list[str], store: bool = True) -> dict[str, tuple[Probe, float]]:
        """Run the predicate on ``commits`` at once -> {commit: (probe, our overhead)}."""
        t0, out, futures = time.perf_counter(), {}, {}
        try:
            for slot, c in enumerate(commits):
                co = Checkout(str(self.user.root), self.options.clone_url, self.result.good,
                              local=partial(self.sandbox.checkout, c, f"probe{slot}"))
                futures[self.executor.submit(c, co, self.predicate, self.options.timeout)] = c
            pending: set[Future] = set(futures)
            while pending:
                done, pending = wait_futures(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    c, probe = futures[f], f.result()
                    out[c] = (probe, max(0.0, time.perf_counter() - t0 - probe.seconds))
                    if store and not (self.first_run and probe.confirm_on_good):
                        self._store(c, probe)
                self.trap.check()
        finally:
            if pending := {f for f in futures if not f.done()}:
                self.executor.stop(pending)   # a signal or an error: end them before cleanup
        return {c: out[c] for c in commits}

    def _check_exit_codes(self, fresh: dict) -> dict[str, tuple[Probe, float]]:
        """git's check at its first run: a 126/127 that GOOD gives too means the command cannot
        run at all, so those bad verdicts become an abort. GOOD's run is kept as evidence."""
        suspects = [c for c, (p, _) in fresh.items() if p.confirm_on_good and p.verdict == "bad"]
        extra: dict[str, tuple[Probe, float]] = {}
        if suspects and self.result.good not in fresh:
            extra = self._execute([self.result.good], store=False)
            for c in suspects:
                fresh[c] = (judged_on_good(fresh[c][0], extra[self.result.good][0]), fresh[c][1])
        for c, (p, _) in {**fresh, **extra}.items():
            if p.confirm_on_good:
                self._store(c, p)
        return extra

    # -- bookkeeping ------------------------------------------------------------------------

    def _tree(self, sha: str) -> str:
        if sha not in self.result.commits:
            self.result.commits[sha] = self.user.info(sha)
        return self.result.commits[sha].tree

    def _store(self, commit: str, probe: Probe) -> None:
        if self.strategy.recall:
            self.cache.put(self._tree(commit), commit, self.identity, probe)
        else:   # every run of a noisy predicate is evidence, appended under its own identity
            self.cache.put(self._tree(commit), commit, flaky_identity(self.identity), probe)

    def _record(self, commit: str, probe: Probe, cached: bool, overhead: float) -> None:
        res = self.result
        role = {res.good: "GOOD", res.bad: "BAD"}.get(commit, "")
        rec = ProbeRecord(len(res.probes) + 1, commit, probe.verdict, probe.seconds, probe.values,
                          probe.reason, cached, res.commits[commit].subject, self._tree(commit),
                          overhead, probe.output, res.rounds, role, probe.detail, probe.cause)
        res.probes.append(rec)
        self.progress.probe(rec)

    def _diagnose(self) -> None:
        """Values at the first bad commit and its first parent (probed, uncounted, if need be)."""
        res = self.result
        parents = dict(res.history).get(res.first_bad or "") or ()
        known = {p.commit: p for p in res.probes if p.verdict in ("good", "bad")}
        bad_probe = known.get(res.first_bad or "")
        if not parents or (bad_probe is not None and set(bad_probe.values) <= {"exit_code"}):
            return   # an exit code says nothing more: not worth another (maybe hour-long) run

        def measured(sha: str) -> tuple[dict, str]:
            if sha in known:
                return known[sha].values, known[sha].verdict
            probe = self.cache.get(self._tree(sha), self.identity)
            if probe is None:
                self.trap.check()
                self.progress.status(f"diagnose: probing {sha[:10]} {res.commits[sha].subject}")
                probe = self._execute([sha])[sha][0]
            return probe.values, probe.verdict
        parent = parents[0]
        (pv, pverdict), (bv, bverdict) = measured(parent), measured(res.first_bad or "")
        res.diagnosis = {"parent": parent, "parent_verdict": pverdict, "first_bad": res.first_bad,
                         "first_bad_verdict": bverdict, "rows": compare(pv, bv)}
