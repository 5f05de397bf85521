"""``--jobs J``: k-ary bisection, J commits probed at once, every verdict marked into git.

    from rlbisect.bisect import make_predicate
    from rlbisect.bisect.parallel import run_parallel
    result = run_parallel("path/to/repo", "v1.0..main", make_predicate(command=["make", "test"]),
                          jobs=4)            # executor=make_executor("ray", 4, ray_gpus=1)

Each round picks J commits that split git's current candidates into J+1 near-equal parts
(:meth:`BisectState.next_probes`), probes them concurrently through an executor, each in its
own worktree (local) or node-local checkout (Ray), then marks every verdict into the real
``git bisect`` of the session, so ``git bisect log`` stays valid and replayable; rounds repeat
until git names the first bad commit or only skips remain: about ⌈log_{J+1} N⌉ rounds. With
J = 1 the commit is git's own choice, exactly as in :func:`~rlbisect.bisect.runner.run_bisect`.
Cached commits cost no slot: they are marked first and the round is planned again.

What is guaranteed, for a predicate whose verdict is monotone (good, then bad from the culprit
on; skips anywhere): without skips, the same first bad commit as ``--jobs 1`` and ``git bisect
run``. With skips the order of probes decides which skipped commits git can get round, so one
run may name the culprit while another lists candidates: the culprit is always the commit
named or among the candidates listed, and on a linear history the candidate lists are equal.
Verdicts of one round that contradict each other (a flaky or non-monotone predicate) are all
recorded; those git would refuse once the others are marked are not marked (the report says so).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Callable

from rlbisect.bisect import repo as gitrepo
from rlbisect.bisect.cache import ProbeCache
from rlbisect.bisect.executors import Checkout, Executor, LocalExecutor, NodeOnly, make_executor
from rlbisect.bisect.predicates import Predicate, Probe
from rlbisect.bisect.runner import BisectResult, ProbeRecord, _Loop, _SignalTrap, conclude, finish, run_loop


class _Slots:
    """One probe worktree per slot, made through the session so that its ``close()`` removes
    them on every exit path; re-pointed between rounds like the session's own probe worktree.

    ``add_lock`` serializes ``git worktree add``: it reads every admin dir under
    ``.git/worktrees/`` and fails on one that another add is still writing.
    """

    def __init__(self, session: gitrepo.BisectSession):
        self.session, self.paths, self.made = session, {}, 0
        self.add_lock = threading.Lock()

    def checkout(self, slot: int, commit: str) -> Path:
        path = self.paths.get(slot)
        try:
            if path is None:
                with self.add_lock:   # a fresh name each time: a failed add never blocks a retry
                    self.made += 1
                    path = self.session._add_worktree(f"probe{slot}-{self.made}", commit,
                                                      checkout=True)
                self.paths[slot] = path
            else:
                gitrepo._git_ok(path, "checkout", "-f", "-q", "--detach", commit)
                gitrepo._git_ok(path, "clean", "-ffdxq")
        except (gitrepo.RepoError, OSError):
            if slot in self.paths:   # start afresh next time
                self.session._remove_worktree(self.paths.pop(slot))
            raise
        return path


def _bind(predicate: Predicate, slots: _Slots, good: str, remote: bool) -> None:
    """``predicates.bind`` for concurrent probes: GOOD is checked out once however many probes
    ask at the same time; on Ray each task checks GOOD out on its own node instead."""
    setup = getattr(predicate, "setup", None)
    if setup is None:
        return
    if remote:
        setup(good, NodeOnly())
        return
    made: list[Path] = []

    def checkout() -> Path:
        with slots.add_lock:
            if not made:
                made.append(slots.session.extra_worktree(good))
        return made[0]
    setup(good, checkout)


class _Rounds(_Loop):
    """The sequential loop's bookkeeping (cache, records, mirror, diagnose) with k-ary rounds."""

    def __init__(self, *args, slots: _Slots, executor: Executor, jobs: int,
                 on_round: Callable[[int, list[str]], None] | None = None):
        super().__init__(*args)
        self.slots, self.executor, self.jobs, self.on_round = slots, executor, jobs, on_round
        self.session = slots.session
        self.rounds = 0
        self.repo_path = str(gitrepo.repo_root(self.repo_obj))

    def _execute(self, commits: list[str], cache: bool = True) -> dict[str, tuple[Probe, float]]:
        """Probe ``commits`` at once; (probe, seconds since the start) each. Results are cached
        as they arrive, so a bisect stopped mid-round re-runs nothing that finished."""
        t0, out = time.perf_counter(), {}
        futures: dict[Future, str] = {}
        pending: set[Future] = set()
        try:
            for slot, c in enumerate(commits):
                co = Checkout(self.repo_path, good=self.result.good,
                              local=lambda s=slot, c=c: self.slots.checkout(s, c))
                f = self.executor.submit(c, co, self.predicate, self.timeout)
                futures[f] = c
                pending.add(f)
            while pending:
                done, pending = wait_futures(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                for f in done:
                    c, probe = futures[f], f.result()
                    out[c] = (probe, time.perf_counter() - t0)
                    # a bad 126/127 of the first run waits for git's check on GOOD
                    if cache and not (self.first_run and probe.confirm_on_good):
                        self.cache.put(self.info(c).tree, c, self.identity, probe)
                    if self.on_status and len(commits) > 1:
                        self.on_status(f"round {self.rounds}: {c[:10]} {probe.verdict} "
                                       f"({len(out)}/{len(commits)} done)")
                self.trap.check()
        finally:
            if pending:   # a signal or an error: end the other probes before any cleanup
                self.executor.stop(pending)
        return out

    def _confirm(self, results: dict[str, tuple[Probe, float]]) -> None:
        """git's check for 126/127 at its first run: the same exit code on GOOD means the
        command cannot run at all, so those bad verdicts become an abort."""
        suspects = [c for c, (p, _) in results.items()
                    if p.confirm_on_good and p.verdict == "bad"]
        if suspects:
            check = self._execute([self.result.good], cache=False)[self.result.good][0]
            for c in suspects:
                p, t = results[c]
                code = p.values.get("exit_code")
                if check.verdict == "abort" or check.reason == "interrupted":
                    p = Probe("abort", p.values, f"{p.reason}; unable to verify on GOOD "
                              f"({check.reason})", p.seconds)
                elif check.values.get("exit_code") == code:
                    p = Probe("abort", p.values, f"bogus exit code {code:g} on GOOD too: the "
                              "command probably cannot be run (not found or not executable?)",
                              p.seconds, output=p.output)
                results[c] = (p, t)
        for c, (p, _) in results.items():
            if p.confirm_on_good:
                self.cache.put(self.info(c).tree, c, self.identity, p)
        self.first_run = False

    def _probe(self, session, commit):
        """One commit through the executor (used by ``diagnose``): (probe, cached, seconds)."""
        probe = self.cache.get(self.info(commit).tree, self.identity)
        if probe is not None:
            return probe, True, 0.0
        probe = self._execute([commit])[commit][0]
        return probe, False, probe.seconds

    def _plan(self, step: gitrepo.Step) -> list[str]:
        if self.jobs == 1:
            return [str(step.commit)]
        # git still wants a commit when our mirror sees none left: follow git
        return self.mirror.next_probes(self.jobs) or [str(step.commit)]

    def _settle(self, picks: list[str], results: dict[str, tuple[Probe, bool, float]],
                step: gitrepo.Step) -> gitrepo.Step:
        """Mark the round's verdicts into git, then record them. Goods go first, oldest first,
        then bads, newest first, then skips: for a monotone predicate every mark stays valid."""
        res, unmarked = self.result, set()
        aborts = [c for c in picks if results[c][0].verdict == "abort"]
        if not aborts:
            self.trap.check()   # an interrupted round is neither marked nor recorded

            def having(v: str) -> list[str]:   # picks come oldest (lowest weight) first
                return [c for c in picks if results[c][0].verdict == v]
            for c in having("good") + having("bad")[::-1] + having("skip"):
                verdict = results[c][0].verdict
                if c not in set(self.mirror.candidates()) or c == self.mirror.bad:
                    unmarked.add(c)
                    continue
                step = self.session.mark(c, verdict)
                self.mirror.mark(c, verdict)  # type: ignore[arg-type]
            if unmarked == set(picks):   # the first pick is always markable: never loop forever
                raise gitrepo.RepoError("internal: git and rlbisect disagree on the candidates "
                                        f"({picks[0][:12]} is not one); please report this")
        for c in picks:
            probe, cached, overhead = results[c]
            reason = probe.reason
            if c in unmarked:
                reason += ("; " if reason else "") + ("not marked: no longer a candidate "
                                                      "after this round's other marks")
            info = self.info(c)
            rec = ProbeRecord(len(res.probes) + 1, c, probe.verdict, probe.seconds, probe.values,
                              reason, cached, info.subject, info.tree, overhead, probe.output)
            res.probes.append(rec)
            if self.on_probe:
                self.on_probe(rec)
        if aborts:
            p = results[aborts[0]][0]
            res.status = "aborted"
            res.message = (f"predicate aborted the bisect at {aborts[0][:12]}: {p.reason} "
                           "(exit codes >= 128 abort, as in git bisect run)")
        return step

    def run(self, session: gitrepo.BisectSession, t_start: float) -> None:
        res = self.result
        self.trap.check()
        step = session.start()
        res.setup_seconds = time.perf_counter() - t_start
        while step.status == "next":
            self.trap.check()
            picks = self._plan(step)
            known = {c: self.cache.get(self.info(c).tree, self.identity) for c in picks}
            recalled = [c for c in picks if known[c] is not None]
            if recalled:   # no slot for what the cache knows: mark it, then plan again
                picks = recalled
                results = {c: (known[c], True, 0.0) for c in recalled}
            else:
                self.rounds += 1
                if self.on_round:
                    self.on_round(self.rounds, picks)
                if self.on_status:
                    left = len(self.mirror.candidates())
                    self.on_status(f"round {self.rounds}: probing {len(picks)} of {left} "
                                   f"candidates: {' '.join(c[:10] for c in picks)}")
                done = self._execute(picks)
                if self.first_run:
                    self._confirm(done)
                results = {c: (p, False, max(0.0, t - p.seconds)) for c, (p, t) in done.items()}
            step = self._settle(picks, results, step)  # type: ignore[arg-type]
            if res.status == "aborted":
                return
        res.status, res.first_bad, res.candidates = step.status, step.first_bad, step.candidates


def run_parallel(repo: str | Path, range_spec: str, predicate: Predicate, *, jobs: int = 2,
                 executor: Executor | None = None, first_parent: bool = False,
                 timeout: float | None = None, use_cache: bool = True,
                 on_probe: Callable[[ProbeRecord], None] | None = None,
                 on_status: Callable[[str], None] | None = None, diagnose: bool = True,
                 on_round: Callable[[int, list[str]], None] | None = None) -> BisectResult:
    """:func:`~rlbisect.bisect.runner.run_bisect` with ``jobs`` probes per round on ``executor``
    (default: :class:`LocalExecutor`). Same arguments, result, exceptions and cleanup;
    ``on_round(n, commits)`` is called as round ``n`` starts. Probes still running when a
    signal arrives are stopped (their process groups killed) before the repository is cleaned.
    """
    t_start = time.perf_counter()
    executor = executor or LocalExecutor(jobs)
    repo_obj = gitrepo.open_repo(repo)
    try:   # read-only checks before the executor starts (Ray can take seconds)
        good, bad = gitrepo.resolve_range(repo_obj, range_spec)
        if jobs < 1:
            raise gitrepo.BisectInputError(f"--jobs must be at least 1, not {jobs}")
        executor.open()   # before the trap: ray.init installs its own SIGTERM handler
        try:
            with _SignalTrap() as trap:
                result = _run(repo_obj, good, bad, predicate, executor, trap, t_start, jobs=jobs,
                              first_parent=first_parent, timeout=timeout, use_cache=use_cache,
                              on_probe=on_probe, on_status=on_status, diagnose=diagnose,
                              on_round=on_round)
        finally:
            executor.close()
    finally:
        repo_obj.close()
    return finish(result, trap, t_start)


def _run(repo_obj, good: str, bad: str, predicate: Predicate, executor: Executor,
         trap: _SignalTrap, t_start: float, *, jobs: int, first_parent: bool, timeout: float | None,
         use_cache: bool, on_probe, on_status, diagnose: bool, on_round) -> BisectResult:
    cache = ProbeCache.for_git_dir(gitrepo.common_dir(repo_obj), use_cache)
    result = BisectResult(good, bad, "", first_parent)
    result.history = gitrepo.history(repo_obj, good, bad, first_parent)
    with gitrepo.BisectSession(repo_obj, good, bad, first_parent) as session:
        slots = _Slots(session)
        _bind(predicate, slots, good, executor.remote)
        result.predicate = predicate.identity()
        loop = _Rounds(repo_obj, predicate, result, cache, trap, timeout, on_probe, on_status,
                       slots=slots, executor=executor, jobs=jobs, on_round=on_round)
        run_loop(loop, session, result, t_start, diagnose)
    conclude(loop, result)
    return result


def parallel_runner(jobs: int, executor: str = "local", **options) -> Callable[..., BisectResult]:
    """``run_bisect``-compatible callable for ``rlbisect run --jobs/--executor``: builds the
    executor now, so a bad option (or a missing Ray) fails before anything runs."""
    ex = make_executor(executor, jobs, **options)

    def run(repo, range_spec, predicate, **kwargs) -> BisectResult:
        return run_parallel(repo, range_spec, predicate, jobs=jobs, executor=ex, **kwargs)
    return run
