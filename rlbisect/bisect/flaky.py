"""``rlbisect run --flaky``: bisect with a predicate that can give a wrong verdict.

    from rlbisect.bisect.flaky import run_flaky
    result = run_flaky("repo", "v1..main", make_predicate(command=["pytest", "-x", "t.py"]))
    print(result.first_bad, result.posterior[:3], result.n_runs)

The search is :mod:`rlbisect.bisect.bayes` (a posterior over the culprit with an unknown flip
rate); this module runs it against git. Differences from the deterministic runner:

* **first parent only.** The noise model needs a line, so ``--flaky`` bisects the first-parent
  chain of GOOD..BAD, as ``git bisect --first-parent`` does (a merge is tested as one unit).
* **git marks at the end, only what is sure.** Probes may repeat and contradict each other, so
  nothing is marked while searching; at the end the session marks the skipped commits, the
  newest commit that is good with posterior >= confidence and the oldest that is bad with
  posterior >= confidence. ``git bisect log`` therefore replays to a valid state that names the
  culprit when it was found (or lists the skipped run, or is still open when unsure).
* **cache.** Every run is a fresh sample: a repeat is always a new run, never a cache read.
  Runs are appended to ``.git/rlbisect/cache.jsonl`` under a separate flaky identity (so a
  deterministic bisect never takes a flaky verdict as the tree's truth), and a later ``--flaky``
  bisect of the same predicate starts from every recorded run of the range's trees as evidence
  (listed as cached probes; they are not counted in ``n_runs``). ``--no-cache`` disables both.
* **no diagnose** step: single values of a noisy predicate would mislead.

Signals and cleanup are the deterministic runner's own (``runner._SignalTrap``, ``_run_probe``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlbisect.bisect import repo as gitrepo
from rlbisect.bisect.bayes import Decision, FlakySearch, default_max_runs
from rlbisect.bisect.cache import ProbeCache, predicate_key
from rlbisect.bisect.predicates import Predicate, Probe, bind
from rlbisect.bisect.runner import (BisectResult, ProbeRecord, _confirm_on_good, _run_probe, _SignalTrap, drive,
                                    finish)

#: Candidates listed in ``posterior`` (JSON) and in the text summary.
TOP = 10


@dataclass
class FlakyResult(BisectResult):
    """A :class:`BisectResult` plus the posterior. ``status`` "ambiguous" (exit 3) covers both
    "only skipped commits can still hold the culprit" and "not confident within the run budget"
    (``outcome`` says which: found / skipped / unknown / aborted / interrupted)."""

    confidence: float = 0.95
    max_runs: int = 0
    n_runs: int = 0                                      # predicate runs made by this bisect
    outcome: str = "interrupted"
    posterior: list[dict] = field(default_factory=list)  # [{"commit", "p"}], likeliest first
    flip_rate: dict = field(default_factory=dict)        # posterior mean and 90% interval

    def json_extra(self) -> dict:
        """Keys :func:`rlbisect.bisect.report.to_json` adds for a flaky bisect."""
        return {"flaky": True, "confidence": self.confidence, "max_runs": self.max_runs,
                "n_runs": self.n_runs, "outcome": self.outcome, "posterior": self.posterior,
                "flip_rate": self.flip_rate}


def flaky_identity(predicate: Predicate) -> str:
    """Cache identity of a predicate's flaky runs, apart from its deterministic verdicts."""
    return json.dumps({"kind": "flaky", "predicate": predicate.identity()})


def recorded_runs(cache: ProbeCache, identity: str, trees: dict[str, list[int]]) -> list[dict]:
    """Every run recorded under ``identity`` for the given trees (tree -> positions), oldest
    first; each row gains ``position``: its own commit's if that is in the range, else the
    first position with that tree."""
    if not cache.enabled or not cache.path.exists():
        return []
    key, rows = predicate_key(identity), []
    for line in cache.path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            if row["predicate"] != key or row["tree"] not in trees \
                    or row["verdict"] not in ("good", "bad", "skip"):
                continue
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line of a killed run
        rows.append(row)
    return rows


class _FlakyLoop:
    """Ask the posterior, probe, observe, record; then mark what is sure in git."""

    def __init__(self, repo_obj, predicate: Predicate, result: FlakyResult, cache: ProbeCache,
                 trap: _SignalTrap, timeout: float | None,
                 on_probe: Callable[[ProbeRecord], None] | None,
                 on_status: Callable[[str], None] | None):
        self.repo_obj, self.predicate, self.result, self.cache = repo_obj, predicate, result, cache
        self.trap, self.timeout, self.on_probe, self.on_status = trap, timeout, on_probe, on_status
        self.order = [sha for sha, _ in result.history]          # position -> sha; 0 is GOOD
        self.search = FlakySearch(len(self.order) - 1)
        self.identity = ""
        self.first_run = True

    def info(self, sha: str) -> gitrepo.CommitInfo:
        if sha not in self.result.commits:
            self.result.commits[sha] = gitrepo.commit_info(self.repo_obj, sha)
        return self.result.commits[sha]

    def _record(self, pos: int, probe: Probe, cached: bool, overhead: float) -> None:
        """Feed the posterior, then report (the reason says where the posterior stands)."""
        sha = self.order[pos]
        if probe.verdict != "abort":
            self.search.observe(pos, probe.verdict)  # type: ignore[arg-type]
        top, p = self.search.top(1)[0]
        res = self.result
        reason = f"{probe.reason}; top {self.order[top][:7]} p={p:.2f}".lstrip("; ")
        rec = ProbeRecord(len(res.probes) + 1, sha, probe.verdict, probe.seconds, probe.values,
                          reason, cached, self.info(sha).subject, self.info(sha).tree, overhead,
                          probe.output)
        res.probes.append(rec)
        if self.on_probe:
            self.on_probe(rec)

    def replay_recorded(self) -> None:
        """Earlier --flaky runs on this range's trees are evidence too: feed them first."""
        trees: dict[str, list[int]] = {}
        for pos, sha in enumerate(self.order[1:-1], start=1):  # GOOD and BAD are not probed
            trees.setdefault(self.info(sha).tree, []).append(pos)
        for row in recorded_runs(self.cache, self.identity, trees):
            positions = trees[row["tree"]]
            own = [p for p in positions if self.order[p] == row.get("commit")]
            probe = Probe(row["verdict"], dict(row.get("values", {})), row.get("reason", ""),
                          float(row.get("seconds", 0.0)), output=row.get("output", ""))
            self._record((own or positions)[0], probe, True, 0.0)

    def run(self, session: gitrepo.BisectSession, t_start: float) -> Decision:
        res, search = self.result, self.search
        self.trap.check()
        session.start()
        res.setup_seconds = time.perf_counter() - t_start
        self.replay_recorded()
        while (d := search.decide(res.confidence, res.max_runs, res.n_runs)).status == "probe":
            self.trap.check()
            t0, pos = time.perf_counter(), int(d.probe)  # type: ignore[arg-type]
            sha = self.order[pos]
            if self.on_status:
                top, p = search.top(1)[0]
                self.on_status(f"run {res.n_runs + 1}: {sha[:10]} {self.info(sha).subject} "
                               f"(top {self.order[top][:7]} p={p:.2f})")
            probe = _run_probe(session, self.predicate, sha, self.timeout)
            spent = probe.seconds
            if self.first_run and probe.confirm_on_good and probe.verdict == "bad":
                probe, extra = _confirm_on_good(session, self.predicate, res.good, probe,
                                                self.timeout)
                spent += extra
            self.first_run = False
            self.trap.check()  # an interrupted run is neither observed nor recorded
            res.n_runs += 1
            self.cache.put(self.info(sha).tree, sha, self.identity, probe)
            self._record(pos, probe, False, max(0.0, time.perf_counter() - t0 - spent))
            if probe.verdict == "abort":
                res.outcome = res.status = "aborted"
                res.message = (f"predicate aborted the bisect at {sha[:12]}: {probe.reason} "
                               "(exit codes >= 128 abort, as in git bisect run)")
                return d
        return d

    def finish(self, session: gitrepo.BisectSession, d: Decision) -> None:
        """Mark in git what is sure, then fill in the result from the decision."""
        res, search = self.result, self.search
        good_pos, bad_pos = search.sure_marks(res.confidence)
        for pos in sorted(search.skipped):
            session.mark(self.order[pos], "skip")
        for pos, verdict in ((good_pos, "good"), (bad_pos, "bad")):
            if pos is not None:
                session.mark(self.order[pos], verdict)
        res.outcome = d.status
        if d.status == "found":
            res.status, res.first_bad = "found", self.order[int(d.first_bad)]  # type: ignore
            res.candidates = [res.first_bad]
        else:
            res.status = "ambiguous"
            res.candidates = [self.order[k] for k in d.candidates]
            why = ("only skipped commits can still hold it" if d.status == "skipped" else
                   f"the run budget ({res.max_runs} runs) is spent")
            res.message = (f"not sure of the first bad commit: {why}; these {len(d.candidates)} "
                           f"commits hold it with posterior {d.p:.3f}")

    def summarize(self) -> None:
        """Posterior of the top candidates and of the flip rate, into the result."""
        self.result.posterior = [{"commit": self.order[k], "p": round(p, 6)}
                                 for k, p in self.search.top(TOP)]
        grid, w = self.search.grid, self.search.eps_posterior()
        cdf = w.cumsum()
        self.result.flip_rate = {"mean": round(float(grid @ w), 4),
                                 "p05": float(grid[int((cdf >= 0.05).argmax())]),
                                 "p95": float(grid[int((cdf >= 0.95).argmax())])}
        for row in self.result.posterior:
            self.info(row["commit"])


def run_flaky(repo: str | Path, range_spec: str, predicate: Predicate, *,
              confidence: float = 0.95, max_runs: int | None = None, first_parent: bool = True,
              timeout: float | None = None, use_cache: bool = True,
              on_probe: Callable[[ProbeRecord], None] | None = None,
              on_status: Callable[[str], None] | None = None,
              diagnose: bool = False) -> FlakyResult:
    """Find the first bad commit of ``GOOD..BAD`` with a predicate that may lie.

    Stops when the likeliest culprit's posterior reaches ``confidence`` (status found, exit 0);
    otherwise (``max_runs`` predicate runs spent, default :func:`~rlbisect.bisect.bayes.
    default_max_runs`, or only skipped commits left) the status is ambiguous (exit 3) and
    ``candidates`` is the smallest set holding ``confidence`` of the posterior. Always the
    first-parent chain (``first_parent`` and ``diagnose`` are accepted for the signature of
    :func:`~rlbisect.bisect.runner.run_bisect` and ignored). Other arguments, errors and cleanup
    as in ``run_bisect``: :class:`BisectInterrupted` after cleanup on a signal.
    """
    if not 0.5 < confidence < 1:
        raise gitrepo.BisectInputError(f"--confidence must be between 0.5 and 1, got {confidence}")
    if max_runs is not None and max_runs < 1:
        raise gitrepo.BisectInputError(f"--max-runs must be at least 1, got {max_runs}")
    t_start = time.perf_counter()
    with _SignalTrap() as trap:
        repo_obj = gitrepo.open_repo(repo)
        try:
            good, bad = gitrepo.resolve_range(repo_obj, range_spec)
            cache = ProbeCache.for_git_dir(gitrepo.common_dir(repo_obj), use_cache)
            result = FlakyResult(good, bad, "", True, confidence=confidence)
            result.history = gitrepo.history(repo_obj, good, bad, True)
            n = len(result.history) - 1
            result.max_runs = default_max_runs(n) if max_runs is None else max_runs
            loop = _FlakyLoop(repo_obj, predicate, result, cache, trap, timeout, on_probe,
                              on_status)
            with gitrepo.BisectSession(repo_obj, good, bad, True) as session:
                bind(predicate, session, good)
                result.predicate = predicate.identity()
                loop.identity = flaky_identity(predicate)
                def body() -> None:
                    decision = loop.run(session, t_start)
                    if result.status != "aborted":
                        trap.check()
                        loop.finish(session, decision)
                drive(session, trap, result, body)
            loop.summarize()
            if result.status in ("aborted", "interrupted"):
                result.outcome = result.status
                result.candidates = [loop.order[k] for k in loop.search.credible_set(confidence)]
            for sha in [good, bad, *result.candidates[:50]]:
                loop.info(sha)
        finally:
            repo_obj.close()
    if trap.signum is not None:
        result.outcome = "interrupted"
    return finish(result, trap, t_start)


def summary(result: FlakyResult) -> str:
    """The text summary of a flaky bisect: verdict, posterior of the top candidates, runs."""
    lines, p = [], {row["commit"]: row["p"] for row in result.posterior}

    def row(sha: str) -> str:
        c = result.commits.get(sha)
        return f"  {p.get(sha, 0.0):.3f}  {sha}  {c.subject if c else ''}".rstrip()
    if result.status == "found" and result.first_bad:
        c = result.commits.get(result.first_bad)
        lines.append(f"{result.first_bad} is the first bad commit "
                     f"(posterior {p.get(result.first_bad, 0.0):.3f} >= {result.confidence})")
        if c:
            lines += [f"    {c.subject}", f"    author: {c.author}  date: {c.date}"]
        if len(result.posterior) > 1:
            lines += ["next likeliest:"] + [row(r["commit"]) for r in result.posterior[1:4]]
    else:
        lines.append(result.message)
        shown = sorted(result.candidates, key=lambda sha: -p.get(sha, 0.0))[:TOP]
        lines += ["posterior of the likeliest first bad commits:"] + [row(sha) for sha in shown]
        if len(result.candidates) > len(shown):
            lines.append(f"  ... and {len(result.candidates) - len(shown)} more")
    fr = result.flip_rate
    if fr and result.probes:
        lines.append(f"estimated flip rate {fr['mean']:.2f} "
                     f"(90% in {fr['p05']:.2f}..{fr['p95']:.2f})")
    cached = len(result.probes) - result.n_runs
    lines.append(f"{result.n_runs} predicate runs" + (f" (+{cached} recorded)" if cached else "")
                 + f" in {result.total_seconds:.1f}s")
    return "\n".join(lines)
