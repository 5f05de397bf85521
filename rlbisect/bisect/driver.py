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
from pathlib import Path

from rlbisect.bisect.cache import flaky_identity, identity, row_probe
from rlbisect.bisect.executors import Executor, NodeOnly, make_executor
from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.predicates import Predicate, Probe
from rlbisect.bisect.predicates.command import folder_in, uncommitted_named
from rlbisect.bisect.probing import Prober
from rlbisect.bisect.report import BisectResult, Progress
from rlbisect._proc.client import close_private
from rlbisect._proc.signals import SignalTrap, Stopped
from rlbisect.bisect.strategies import Strategy, make_strategy
from rlbisect.bisect.terms import FixSearch, reword
from rlbisect.errors import Cause, GitError, Interrupted, Status, Verdict, describe
from rlbisect.git.repo import Repo
from rlbisect.git.sandbox import Sandbox, Step


def bisect(repo: str | Path | None, range_spec: str, predicate: Predicate,
           options: BisectOptions | None = None, *, strategy: Strategy | None = None,
           executor: Executor | None = None, progress: Progress | None = None) -> BisectResult:
    """Bisect ``GOOD..BAD`` in ``repo`` (None: the one ``GIT_DIR`` names, else the current
    folder's) with ``predicate``; the repository is only read.

    Raises :class:`~rlbisect.errors.InputError` for bad input (nothing ran) and
    :class:`~rlbisect.errors.Interrupted` (with the partial result) after cleanup on a signal.
    """
    t_start = time.perf_counter()
    options = options or BisectOptions()
    if options.terms is not None:      # a fix: the predicate read the other way round (bisect/terms.py)
        predicate = FixSearch(predicate, options.terms)
    user = Repo.open(repo)
    good, bad = user.resolve_range(range_spec)
    strategy = strategy or make_strategy(options, predicate)
    switch, unwrapped = _may_switch(options, strategy, predicate), predicate
    predicate = strategy.wrap(predicate)   # the measured search runs one seed per probe
    predicate.preflight(user, bad)   # input the probes could never use: refused now
    first_parent = options.first_parent or strategy.first_parent_only
    history, commits = user.history(good, bad, first_parent)
    # the measured search follows first parents: across merges it would answer another question
    switch = switch and (first_parent or all(len(ps) < 2 for _, ps in history))
    result = BisectResult(good, bad, strategy=strategy.name, first_parent=first_parent,
                          history=history, commits=commits, terms=options.terms)
    executor = executor or make_executor(options)
    executor.open()   # before the trap: ray.init installs its own SIGTERM handler
    try:
        with SignalTrap() as trap, Sandbox(user) as sandbox:
            run = _Run(user, sandbox, predicate, strategy, executor, options, result, trap, progress or Progress(),
                       switch)
            run.go(t_start)
            if run.switched_at is not None:
                result = _measured_after(run, run.switched_at, unwrapped, t_start)
    finally:
        executor.close()
        close_private()          # the fork server this run started for its probes, if any
    result.total_seconds = time.perf_counter() - t_start
    if trap.signum is not None:
        result.status, result.signum = Status.INTERRUPTED, trap.signum
        result.message = f"interrupted by {signal.Signals(trap.signum).name}"
        raise Interrupted(trap.signum, result)
    return result


def _may_switch(options: BisectOptions, strategy: Strategy, predicate: Predicate) -> bool:
    """Short runs with a --metric, judged per commit by default: the search may switch to the
    measured one when seeds turn out not to match (a fix search and explicit --verify/--diagnose,
    which the measured search does not take, keep the per-commit judgement)."""
    return (strategy.recall and not options.per_commit and options.terms is None and options.verify is None
            and not options.diagnose and getattr(predicate, "measures", None) is not None)


def _measured_after(run: "_Run", at: str, predicate: Predicate, t_start: float) -> BisectResult:
    """The measured search (as --flaky) from where a per-commit search learned that a good verdict's
    runs were unlike GOOD's on the same seeds: each further per-commit verdict would be a test at the
    seed spread, and together they can name a wrong commit. The per-commit probes stay in the record
    (role "per-commit") and their runs in the count; the measured search starts from their runs
    (pooled, as draws) and draws its own on fresh seeds."""
    old = run.result
    options = run.options.model_copy(update={"flaky": True})
    strategy = make_strategy(options, predicate)
    first_parent = options.first_parent or strategy.first_parent_only
    history, commits = run.user.history(old.good, old.bad, first_parent)
    pooled = predicate.drawn(old.probes) if hasattr(predicate, "drawn") else []   # runs already paid for
    for p in old.probes:
        p.role = "per-commit"
    fresh = [int(p.values.get("seeds", 0)) for p in old.probes if not p.cached]
    spent = sum(fresh) + max(fresh + [0])      # and GOOD's: the most any probe used
    before = len(old.probes)
    result = BisectResult(old.good, old.bad, strategy=strategy.name, first_parent=first_parent, history=history,
                          commits={**old.commits, **commits}, probes=list(old.probes), rounds=old.rounds)
    run.prober.progress.status(f"the runs at {at[:10]} did not repeat GOOD's on the same seeds: switching "
                               "to the measured search (as --flaky; --per-commit keeps judging each commit)")
    _Run(run.user, run.sandbox, strategy.wrap(predicate), strategy, run.executor, options, result, run.trap,
         run.prober.progress, pooled=pooled).go(t_start)
    result.extra["switched"] = {"at": at, "per_commit_probes": before, "per_commit_runs": spent,
                                "pooled_runs": len(pooled)}
    result.message = (f"{result.message}; " if result.message else "") + (
        f"measured search: the per-commit runs at {at[:10]} did not repeat GOOD's on the same seeds "
        f"({before} per-commit probes, {spent} runs, before the switch)")
    return result


class _Run:
    """The state of one bisect while it runs."""

    def __init__(self, user: Repo, sandbox: Sandbox, predicate: Predicate, strategy: Strategy,
                 executor: Executor, options: BisectOptions, result: BisectResult,
                 trap: SignalTrap, progress: Progress, switch: bool = False,
                 pooled: list[tuple[str, Probe]] | None = None):
        self.user, self.sandbox, self.predicate, self.strategy = user, sandbox, predicate, strategy
        self.executor, self.options, self.result, self.trap = executor, options, result, trap
        self.good_lock = threading.Lock()
        self.good_tree: Path | None = None
        self.prober = Prober(user, sandbox, predicate, executor, options, result, trap, progress,
                             strategy.recall)
        self.switch = switch                 # see _may_switch
        self.pooled = pooled or []           # runs a switched search starts from (_measured_after)
        self.switched_at: str | None = None  # the commit whose good verdict was a test at the spread
        self.goods = [result.good]           # the commits marked good in git so far
        self.unbisectable = False            # a bad commit older than a good one (_good_descendant)

    # -- the loop ---------------------------------------------------------------------------

    def go(self, t_start: float) -> None:
        res, strategy = self.result, self.strategy
        strategy.start(res.history, res.good, res.bad, res.first_parent)
        self._setup_predicate()
        res.predicate = self.prober.identity = identity(self.predicate, self.prober.cache.key(), self.user.root)
        ended = "found"      # how the search ended, for the strategy's report
        try:
            step = self.sandbox.bisect_start(res.good, res.bad, res.first_parent)
            res.setup_seconds = time.perf_counter() - t_start
            if not strategy.recall:
                self._replay_recorded_runs()
            if self.pooled:
                strategy.replay_probes(self.pooled)
            last = self._search(step)
            if last is not None:
                self._conclude(last)
            elif self.switched_at is not None:
                return
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
        if ended != "found":   # candidates of a search git cannot do would read as answers
            res.candidates = [] if self.unbisectable else strategy.candidates()
            res.extra = strategy.report(ended)
        if self.options.terms is not None and res.extra.get("posterior"):   # "GOOD already bad" is the fix's OLD
            res.extra["posterior"] = [{**row, "commit": reword(row["commit"], self.options.terms)}
                                      for row in res.extra["posterior"]]

    def _search(self, step: Step) -> Step | None:
        """Rounds until the strategy has nothing left to probe -> git's last state; None when
        the predicate aborted or cannot run here (the result says why)."""
        res, strategy = self.result, self.strategy
        while picks := strategy.plan(step):
            self.trap.check()
            done = self.prober.round(picks)
            self.trap.check()   # an interrupted round is neither marked nor concluded
            aborted = next(((c, p) for c, p in done if p.verdict is Verdict.ABORT), None)
            if aborted is not None:
                res.status = Status.ABORTED
                res.message = (f"predicate aborted the bisect at {aborted[0][:12]}: "
                               f"{aborted[1].reason} (exit codes >= 128 abort, as in git bisect run)")
                return None
            # BAD judged good is one test of the endpoints ("BAD passes"), not a step of the search
            if self.switch and (at := next((c for c, p in done if p.verdict is Verdict.GOOD and c != res.bad
                                            and p.detail.get("reproduced") is False), None)):
                self.switched_at = at
                return None
            for commit, verdict in strategy.observe_probes(done):
                if verdict == "bad" and (newer := self._good_descendant(commit)) is not None:
                    res.status, self.unbisectable = Status.UNSURE, True
                    res.message = (f"{commit[:12]} is bad, but it is an ancestor of {newer[:12]}, which is good: "
                                   "the fault is older than that good commit and came back with a branch merged "
                                   "into the range (git cannot bisect that); --first-parent finds the merge")
                    return None
                step = self.sandbox.mark(commit, verdict)
                if verdict == "good":
                    self.goods.append(commit)
            for rec in res.probes[-len(done):]:
                if rec.commit in strategy.dropped:
                    rec.reason += "; not marked: no longer a candidate after this round's other marks"
            if (why := self._hopeless()) is not None:
                res.status = Status.AMBIGUOUS
                res.message = (f"the first {len(res.probes)} probes were all skipped: {why}; "
                               "stopped early, the predicate cannot run here (see its output)")
                return None
        return step

    def _good_descendant(self, commit: str) -> str | None:
        """A good-marked commit that ``commit`` is an ancestor of: marked bad, git would refuse it
        (a merge base it asked for, or a side branch's commit older than a good mark)."""
        return next((g for g in self.goods if g != commit and self.user.is_ancestor(commit, g)), None)

    def _hopeless(self) -> str | None:
        """The reason, when the first probes (3 or more) all skipped for one reason of ours: the
        adapter or runner missing, the checks unable to start, GOOD's own runs failing. Not a
        command's own exit 125 or a timeout: those can hold for a stretch of history and end."""
        fresh = [p for p in self.result.probes if not p.cached]
        ours = {Cause.CANNOT_RUN, Cause.MACHINERY, Cause.REFERENCE}
        # GOOD's own runs failing is one reason, whatever temporary path each failed run names
        reasons = {"GOOD" if p.cause is Cause.REFERENCE else p.reason for p in fresh}
        if len(fresh) < 3 or len(reasons) != 1 or any(p.cause not in ours for p in fresh):
            return None
        return fresh[-1].reason

    def _conclude(self, step: Step) -> None:
        res, strategy = self.result, self.strategy
        for commit, verdict in strategy.final_marks():
            step = self.sandbox.mark(commit, verdict)
        end = strategy.conclude(step)
        res.status, res.first_bad, res.candidates = end.status, end.first_bad, end.candidates
        res.message, res.extra = end.message, end.extra
        if self.options.terms is not None:
            res.message = reword(res.message, self.options.terms)
        codes = {p.values.get("exit_code") for p in res.probes}
        if res.status is Status.GOOD_FAILS and len(codes) == 1 and None not in codes:
            res.message += f" (exit {codes.pop():g} at every commit probed)"
        if res.status is Status.GOOD_FAILS and (named := uncommitted_named(
                self.user, res.good, "\n".join(p.output for p in res.probes if p.commit == res.good), folder_in(self.user))):
            res.message += (f"; its output names {', '.join(named)}, in your working tree but not in the commits "
                            "(untracked or ignored): a probe runs in a clean checkout, so give an absolute path or commit it")
        if res.status is not Status.FOUND or not strategy.recall or res.first_bad is None:
            return
        parents = list(dict(res.history).get(res.first_bad) or ())
        parent = next(iter(parents), None)
        if parent is not None and (doubt := self.prober.verify(res.first_bad, parents)) is not None:
            # a verdict that changed on a rerun: nothing the search concluded stands, the named
            # commit least of all (listed alone, it read as the answer)
            res.status, res.candidates, res.first_bad, res.message = doubt[0], [], None, doubt[1]
            return
        if parent is not None and (why := self.prober.confirm(res.first_bad, parent)) is not None:
            # a wrong step may lie anywhere: the named commit, listed alone, would read as the answer
            res.status, res.candidates, res.first_bad, res.message = Status.UNSURE, [], None, why
            return
        if self.options.diagnose is not False:
            try:
                res.diagnosis = self.prober.diagnose(res.first_bad, parent)
            except Stopped:
                raise
            except Exception as e:     # the answer is found: an extra never loses it
                res.diagnosis = {"error": describe(e)}

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
        for row in self.prober.cache.runs(flaky_identity(self.prober.identity), set(trees)):
            sha = row["commit"] if row.get("commit") in self.result.commits else trees[row["tree"]]
            probe = row_probe(row)   # with its detail: a run's fingerprint is what the seed-blind check reads
            self.prober.record(sha, probe, True, 0.0, recorded=row.get("recorded", ""))
            self.strategy.replay_probes([(sha, probe)])
