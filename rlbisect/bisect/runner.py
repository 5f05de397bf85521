"""Orchestration: repository + predicate + cache -> a bisect result, with cleanup on every path.

    from rlbisect.bisect import run_bisect, make_predicate
    result = run_bisect("path/to/repo", "v1.0..main", make_predicate(command=["make", "test"]))
    print(result.status, result.first_bad, result.exit_code)

One probe at a time, the commit to test is always git's own choice (``BISECT_HEAD`` of a real
``git bisect`` in a temporary worktree), so the result, skips included, is what ``git bisect
run`` gives. Signals (SIGINT, SIGTERM, SIGHUP) only set a flag while a bisect runs: the running
probe's process group is killed, the repository is cleaned up, then :class:`BisectInterrupted`
is raised, so a git command is never cut in half by us.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from rlbisect.bisect import repo as gitrepo
from rlbisect.bisect.cache import ProbeCache
from rlbisect.bisect.diagnose import compare
from rlbisect.bisect.predicates import STOP, Predicate, Probe, bind
from rlbisect.bisect.search import BisectState

Status = Literal["found", "ambiguous", "aborted", "interrupted"]
EXIT_CODES = {"found": 0, "ambiguous": 3, "aborted": 4}


@dataclass
class ProbeRecord:
    """One commit tested: what the report shows and the JSON lists."""

    order: int                  # 1 for the first probe
    commit: str
    verdict: str                # good | bad | skip | abort
    seconds: float              # the predicate's own time (as recorded, when cached)
    values: dict[str, float]
    reason: str
    cached: bool
    subject: str
    tree: str
    overhead: float             # rlbisect's time for this probe: checkout, marks, cache
    output: str = ""


@dataclass
class BisectResult:
    """Everything a run found out; ``exit_code`` is what ``rlbisect run`` exits with."""

    good: str
    bad: str
    predicate: str                       # the predicate's identity
    first_parent: bool = False
    status: Status = "interrupted"
    first_bad: str | None = None
    candidates: list[str] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    bisect_log: str = ""
    message: str = ""                    # why it aborted or stopped
    signum: int | None = None
    commits: dict[str, gitrepo.CommitInfo] = field(default_factory=dict)
    history: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    setup_seconds: float = 0.0
    total_seconds: float = 0.0
    diagnosis: dict = field(default_factory=dict)   # first bad vs its parent (see diagnose.py)

    @property
    def exit_code(self) -> int:
        """0 found, 3 only skipped candidates left, 4 predicate aborted, 128+N on signal N."""
        if self.status == "interrupted":
            return 128 + (self.signum or signal.SIGINT)
        return EXIT_CODES[self.status]


class BisectInterrupted(Exception):
    """rlbisect got a signal; the repository is already cleaned up. ``result`` is partial."""

    def __init__(self, signum: int, result: BisectResult):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.result = signum, result


class _Stopped(Exception):
    pass


class _SignalTrap:
    """While active, SIGINT/SIGTERM/SIGHUP set :data:`STOP` instead of raising mid-command."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, object] = {}

    def _handler(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        STOP.set()

    def __enter__(self) -> "_SignalTrap":
        STOP.clear()
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._saved[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._saved.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        STOP.clear()

    def check(self) -> None:
        if self.signum is not None or STOP.is_set():
            raise _Stopped


def _run_probe(session: gitrepo.BisectSession, predicate: Predicate, commit: str,
               timeout: float | None) -> Probe:
    """Materialize the commit and probe it; a failure of ours is a skip with its reason."""
    try:
        worktree = session.materialize(commit)
    except (gitrepo.RepoError, OSError) as e:
        return Probe("skip", reason=f"checkout failed: {e}", cacheable=False)
    try:
        return predicate.probe(worktree, commit, timeout)
    except Exception as e:  # a crash in the probe machinery is never evidence of a bad commit
        return Probe("skip", reason=f"probe crashed: {type(e).__name__}: {e}", cacheable=False)


def _confirm_on_good(session: gitrepo.BisectSession, predicate: Predicate, good: str,
                     probe: Probe, timeout: float | None) -> tuple[Probe, float]:
    """git's check for 126/127 on the first run: the same code on GOOD means 'cannot run'."""
    check = _run_probe(session, predicate, good, timeout)
    code = probe.values.get("exit_code")
    if check.verdict == "abort" or check.reason == "interrupted":
        return Probe("abort", probe.values, f"{probe.reason}; unable to verify on GOOD "
                     f"({check.reason})", probe.seconds), check.seconds
    if check.values.get("exit_code") == code:
        return Probe("abort", probe.values, f"bogus exit code {code:g} on GOOD too: the command "
                     "probably cannot be run (not found or not executable?)", probe.seconds,
                     output=probe.output), check.seconds
    return probe, check.seconds


class _Loop:
    """The probe loop of one run: ask git, probe (or recall), mark, record."""

    def __init__(self, repo_obj, predicate: Predicate, result: BisectResult, cache: ProbeCache,
                 trap: _SignalTrap, timeout: float | None,
                 on_probe: Callable[[ProbeRecord], None] | None,
                 on_status: Callable[[str], None] | None):
        self.repo_obj, self.predicate, self.result, self.cache = repo_obj, predicate, result, cache
        self.trap, self.timeout, self.on_probe, self.on_status = trap, timeout, on_probe, on_status
        self.identity = predicate.identity()
        self.mirror = BisectState(dict(result.history), {result.good}, result.bad,
                                  result.first_parent)
        self.first_run = True  # git checks 126/127 on GOOD at its first run only

    def info(self, sha: str) -> gitrepo.CommitInfo:
        if sha not in self.result.commits:
            self.result.commits[sha] = gitrepo.commit_info(self.repo_obj, sha)
        return self.result.commits[sha]

    def _probe(self, session: gitrepo.BisectSession, commit: str) -> tuple[Probe, bool, float]:
        """(probe, cached, predicate seconds spent now)."""
        tree = self.info(commit).tree
        probe = self.cache.get(tree, self.identity)
        if probe is not None:
            return probe, True, 0.0
        probe = _run_probe(session, self.predicate, commit, self.timeout)
        spent = probe.seconds
        if self.first_run and probe.confirm_on_good and probe.verdict == "bad":
            probe, extra = _confirm_on_good(session, self.predicate, self.result.good, probe,
                                            self.timeout)
            spent += extra
        self.first_run = False
        self.cache.put(tree, commit, self.identity, probe)  # as soon as known: resumable
        return probe, False, spent

    def run(self, session: gitrepo.BisectSession, t_start: float) -> None:
        res = self.result
        self.trap.check()
        step = session.start()
        res.setup_seconds = time.perf_counter() - t_start
        while step.status == "next":
            self.trap.check()
            t0, commit = time.perf_counter(), str(step.commit)
            if self.on_status:
                left = "" if step.remaining is None else f" ({step.remaining} left after this)"
                self.on_status(f"probe {len(res.probes) + 1}: {commit[:10]} "
                               f"{self.info(commit).subject}{left}")
            probe, cached, spent = self._probe(session, commit)
            self.trap.check()  # an interrupted probe is neither marked nor recorded
            if probe.verdict != "abort":
                step = session.mark(commit, probe.verdict)
                self.mirror.mark(commit, probe.verdict)  # type: ignore[arg-type]
            rec = ProbeRecord(len(res.probes) + 1, commit, probe.verdict, probe.seconds,
                              probe.values, probe.reason, cached, self.info(commit).subject,
                              self.info(commit).tree,
                              max(0.0, time.perf_counter() - t0 - spent), probe.output)
            res.probes.append(rec)
            if self.on_probe:
                self.on_probe(rec)
            if probe.verdict == "abort":
                res.status = "aborted"
                res.message = (f"predicate aborted the bisect at {commit[:12]}: {probe.reason} "
                               "(exit codes >= 128 abort, as in git bisect run)")
                return
        res.status, res.first_bad, res.candidates = step.status, step.first_bad, step.candidates

    def diagnose(self, session: gitrepo.BisectSession) -> None:
        """Values at the first bad commit and its (first) parent, probing the parent only if the
        bisect did not (a cached result is reused; the extra probe is not counted in the probes)."""
        res = self.result
        parents = self.repo_obj.commit(res.first_bad).parents
        if not parents:
            return
        parent = parents[0].hexsha
        known = {p.commit: p for p in res.probes}
        bad_probe = known.get(res.first_bad)
        if bad_probe is not None and set(bad_probe.values) <= {"exit_code"}:
            return   # an exit code says nothing more: not worth another (maybe hour-long) run

        def measured(sha: str) -> tuple[dict, str]:
            if sha in known:
                return known[sha].values, known[sha].verdict
            self.trap.check()
            if self.on_status:
                self.on_status(f"diagnose: probing {sha[:10]} {self.info(sha).subject}")
            probe, _, _ = self._probe(session, sha)
            return probe.values, probe.verdict
        (pv, pverdict), (bv, bverdict) = measured(parent), measured(res.first_bad)
        res.diagnosis = {"parent": parent, "parent_verdict": pverdict, "first_bad": res.first_bad,
                         "first_bad_verdict": bverdict, "rows": compare(pv, bv)}


def drive(session: gitrepo.BisectSession, trap: "_SignalTrap", result: BisectResult,
          body: Callable[[], object]) -> None:
    """Run a loop's `body` in its session. A stop (our signal flag, or git killed by the same
    Ctrl-C) marks the result interrupted; the bisect log is kept either way."""
    try:
        body()
    except _Stopped:
        result.status = "interrupted"
    except gitrepo.RepoError:
        if trap.signum is None:
            raise
        result.status = "interrupted"
    result.bisect_log = session.log()


def run_loop(loop: "_Loop", session: gitrepo.BisectSession, result: BisectResult, t_start: float,
             diagnose: bool) -> None:
    """The probe loop, then (after a find) the diagnosis, under :func:`drive`."""
    def body() -> None:
        loop.run(session, t_start)
        if diagnose and result.status == "found" and result.first_bad:
            loop.diagnose(session)
    drive(session, loop.trap, result, body)


def conclude(loop: "_Loop", result: BisectResult) -> None:
    """After the session: a stopped run lists what is still possible; subjects for the report."""
    if result.status in ("aborted", "interrupted"):
        result.candidates = loop.mirror.candidates()
    name_commits(loop, result)


def name_commits(loop: "_Loop", result: BisectResult, limit: int = 50) -> None:
    """Look up subjects for the report: the endpoints and the candidates (all of a skip-only ending)."""
    named = result.candidates if result.status == "ambiguous" else result.candidates[:limit]
    for sha in [result.good, result.bad, *named]:
        loop.info(sha)


def finish(result: BisectResult, trap: "_SignalTrap", t_start: float) -> BisectResult:
    """Stamp the wall time; after a signal, raise BisectInterrupted (cleanup has already run)."""
    result.total_seconds = time.perf_counter() - t_start
    if trap.signum is not None:
        result.status, result.signum = "interrupted", trap.signum
        result.message = f"interrupted by {signal.Signals(trap.signum).name}"
        raise BisectInterrupted(trap.signum, result)
    return result


def run_bisect(repo: str | Path, range_spec: str, predicate: Predicate, *,
               first_parent: bool = False, timeout: float | None = None, use_cache: bool = True,
               on_probe: Callable[[ProbeRecord], None] | None = None,
               on_status: Callable[[str], None] | None = None, diagnose: bool = True) -> BisectResult:
    """Bisect ``GOOD..BAD`` in ``repo`` with ``predicate``; the repository is left as it was.

    ``timeout`` bounds each probe (seconds; a timeout is a skip, never bad). ``use_cache=False``
    neither reads nor writes ``.git/rlbisect/cache.jsonl``. ``on_probe`` is called after each
    probe, ``on_status`` with a line describing what runs now. With ``diagnose``, a find is
    followed by :meth:`_Loop.diagnose` (first bad vs parent values). Returns a result whose status
    is found / ambiguous / aborted. Raises :class:`~rlbisect.bisect.repo.BisectInputError`
    for bad input (nothing changed) and :class:`BisectInterrupted` after cleanup on a signal.
    """
    t_start = time.perf_counter()
    with _SignalTrap() as trap:
        repo_obj = gitrepo.open_repo(repo)
        try:
            good, bad = gitrepo.resolve_range(repo_obj, range_spec)
            cache = ProbeCache.for_git_dir(gitrepo.common_dir(repo_obj), use_cache)
            result = BisectResult(good, bad, "", first_parent)
            result.history = gitrepo.history(repo_obj, good, bad, first_parent)
            with gitrepo.BisectSession(repo_obj, good, bad, first_parent) as session:
                bind(predicate, session, good)
                result.predicate = predicate.identity()
                loop = _Loop(repo_obj, predicate, result, cache, trap, timeout, on_probe, on_status)
                run_loop(loop, session, result, t_start, diagnose)
            conclude(loop, result)
        finally:
            repo_obj.close()
    return finish(result, trap, t_start)
