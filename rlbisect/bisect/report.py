"""What a bisect found out: one result type for every strategy, as text, JSON and markdown.

JSON keys (``rlbisect run --json FILE``): ``good``, ``bad``, ``status``, ``exit_code``, ``message``,
``first_bad`` (null unless found), ``candidates``, ``strategy``, ``predicate``, ``first_parent``,
``terms`` (a fix search's ``old`` and ``new`` words, else null; ``first_bad`` is then the first new commit),
``n_probes``, ``n_rounds``, ``probes`` (each ``commit``, ``verdict``, ``seconds``, ``values``,
``reason``, ``cached``, ``subject``, ``tree``, ``overhead``, ``round``, ``role`` (GOOD, BAD, verify, confirm,
per-commit), ``output``: the predicate's output's tail, ``evidence``: structured, e.g. short-run's per-seed values;
``verdict`` is ``ran`` for a measured search's run, a number with no verdict),
``bisect_log`` (replay it with ``git bisect replay``), ``diagnosis`` (after a find: the first bad
commit's values against its parent's, biggest movers first) and, with ``--flaky``, ``posterior``
(``p`` per commit), ``rates``, ``runs_per_commit``, ``n_runs``, ``outcome``, ``confidence``,
``max_runs``. Commits are full ids."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbisect.errors import Cause, ExitCode, Status, Verdict
from rlbisect.bisect.diagnose import render as render_diagnosis
from rlbisect.git.repo import CommitInfo


@dataclass
class ProbeRecord:
    """One run of the predicate: what the report shows and the JSON lists."""

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
    output: str = ""            # tail of the predicate's output
    round: int = 0              # the round it ran in (several probes share one with --jobs)
    role: str = ""              # GOOD/BAD: an endpoint; verify, confirm, per-commit (before a switch)
    detail: dict = field(default_factory=dict)   # structured evidence (short-run: per-seed values)
    cause: Cause | None = None   # why, as data (errors.Cause)
    recorded: str = ""          # cached: when the verdict was recorded
    term: str = ""              # a fix search: the verdict in its words (good: OLD's, bad: NEW's)


@dataclass
class BisectResult:
    """Everything a run found out; ``exit_code`` is what ``rlbisect run`` exits with."""

    good: str
    bad: str
    predicate: str = ""
    strategy: str = "git"
    first_parent: bool = False
    status: Status = Status.INTERRUPTED
    first_bad: str | None = None
    candidates: list[str] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    bisect_log: str = ""
    message: str = ""
    signum: int | None = None
    commits: dict[str, CommitInfo] = field(default_factory=dict)
    history: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    setup_seconds: float = 0.0
    total_seconds: float = 0.0
    rounds: int = 0
    diagnosis: dict = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)   # the strategy's own (posterior, ...)
    terms: tuple[str, str] | None = None   # a fix search's (old, new); None: a regression's good/bad

    @property
    def exit_code(self) -> int:
        if self.status is Status.INTERRUPTED:
            return ExitCode.INTERRUPTED + (self.signum or 2)
        return self.status.exit_code

    @property
    def new(self) -> str:
        """What the answer is the first of: "bad", or a fix search's new term ("fixed")."""
        return self.terms[1] if self.terms else "bad"

    def subject(self, sha: str) -> str:
        return c.subject if (c := self.commits.get(sha)) else ""

    def to_json(self) -> dict:
        return {
            "good": self.good, "bad": self.bad, "status": self.status,
            "exit_code": self.exit_code, "message": self.message,
            "first_bad": self.first_bad if self.status == "found" else None,
            "candidates": self.candidates, "strategy": self.strategy,
            "predicate": _object(self.predicate), "first_parent": self.first_parent,
            "n_probes": sum(p.role not in ("verify", "confirm", "per-commit") for p in self.probes), "n_rounds": self.rounds,
            "n_verify": sum(p.role == "verify" for p in self.probes),
            "probes": [{"commit": p.commit, "verdict": "ran" if said(p) == "ran" else p.verdict, "cause": p.cause,
                        "seconds": round(p.seconds, 4),
                        "values": p.values, "reason": p.reason, "cached": p.cached,
                        "subject": p.subject, "tree": p.tree, "overhead": round(p.overhead, 4),
                        "round": p.round, "role": p.role, "output": p.output, "recorded": p.recorded or None,
                        "evidence": p.detail, **({"term": p.term} if p.term and said(p) != "ran" else {})}
                       for p in self.probes],
            "bisect_log": self.bisect_log, "diagnosis": self.diagnosis,
            "terms": {"old": self.terms[0], "new": self.terms[1]} if self.terms else None, **self.extra,
        }

    def _commit_lines(self, sha: str) -> list[str]:
        c = self.commits.get(sha)
        return [f"    {c.subject}", f"    author: {c.author}  date: {c.date}"] if c else []

    def _posterior_lines(self) -> list[str]:
        """--flaky: the likeliest answers, best first, until they hold the confidence asked."""
        out, mass = [], 0.0
        for row in self.extra["posterior"]:
            out.append(f"{row['p']:.3f}  {row['commit']}  {self.subject(row['commit'])}".rstrip())
            mass += row["p"]
            if mass >= self.extra.get("confidence", 0.95):
                break
        return out

    def _endpoint_lines(self) -> list[str]:
        """--flaky: what GOOD and BAD did, counted, no model in between."""
        runs = self.extra.get("runs_per_commit") or {}
        if (metric := self.extra.get("metric")) is not None:   # the measured search: numbers
            told, worst = [], math.inf if self.extra.get("direction") == "higher" else -math.inf
            for name, sha in zip(("OLD", "NEW") if self.terms else ("GOOD", "BAD"), (self.good, self.bad)):   # NaN: worst
                vals = sorted(v if math.isfinite(v := p.values[metric]) else worst
                              for p in self.probes if p.commit == sha and metric in p.values)
                if vals:
                    told.append(f"{name} median {statistics.median(vals):.4g} over {len(vals)} runs")
            return [f"{metric} at {', '.join(told)}"] if told else []
        told = [f"{name} {r['bad']} of {r['good'] + r['bad']}" for name, sha in
                (("OLD" if self.terms else "GOOD", self.good), ("NEW" if self.terms else "BAD", self.bad)) if (r := runs.get(sha))
                and r["good"] + r["bad"]]
        return [f"runs {'passed' if self.terms else 'failed'} at {', '.join(told)}"] if told else []

    def summary(self) -> str:
        """What was found, as git would say it, then the evidence and the cost."""
        lines: list[str] = []
        post = {row["commit"]: row["p"] for row in self.extra.get("posterior", [])}
        if self.status == "found" and self.first_bad:
            lines.append(f"{self.first_bad} is the first {self.new} commit"
                         + (f" ({self.message})" if self.message else ""))
            lines += self._commit_lines(self.first_bad)
            culprit = next((p for p in self.probes if p.commit == self.first_bad and p.detail), None)
            if culprit is not None:
                lines += [f"    {ln}" for ln in evidence_lines(culprit.detail)]
        elif self.status in ("bad_passes", "good_fails"):
            lines.append(f"no {'fix' if self.terms else 'culprit'}: {self.message}")
            role, said = ("BAD", "NEW") if self.status == "bad_passes" else ("GOOD", "OLD")   # a fix: its words
            # --flaky: one run of many says little; the counts below say it all
            probe = None if post else next((p for p in self.probes if p.role == role), None)
            if probe is not None:
                lines.append(f"  {said if self.terms else role} {probe.commit[:10]}: {probe.term or probe.verdict} ({probe.reason})")
                lines += [f"    {k} = {v:.4g}" for k, v in list(probe.values.items())[:12]]
                if probe.output:
                    lines += ["  its output (last lines):"] + [f"    | {ln}" for ln in
                                                                probe.output.splitlines()]
        else:
            lines += [self.message] if self.message else []
            shown = self.candidates[:10]
            if self.status == "aborted" and not any(p.role == "" and p.verdict in (Verdict.GOOD, Verdict.BAD) for p in self.probes):
                lines, shown = [*lines, "nothing was learned about the range"], []   # each commit is still one
            elif self.status == "ambiguous":
                lines.append("There are only 'skip'ped commits left to test.\n"
                             f"The first {self.new} commit could be any of:")
                shown = self.candidates
            elif post:   # --flaky: the likeliest answers, "nothing changed" included
                lines += ["posterior of the likeliest answers:"] + self._posterior_lines()
                shown = []
            elif self.candidates:
                lines.append(f"The first {self.new} commit is still one of:")
            lines += [f"{sha}  {self.subject(sha)}".rstrip() for sha in shown]
            if shown and len(shown) < len(self.candidates):
                lines.append(f"... and {len(self.candidates) - len(shown)} more")
        rates = self.extra.get("rates")
        # the sides' rates mean something once there is a culprit to split the runs at
        if rates and self.probes and self.status == "found":
            lines.append(("pass rate before the fix" if self.terms else "failure rate before the culprit")
                         + " {before}, after it {after}".format(
                **{side: f"{r['mean']:.2f} (90% in {r['p05']:.2f}..{r['p95']:.2f})"
                   for side, r in rates.items()}))
        lines += self._endpoint_lines()
        guessed = sum(p.verdict is Verdict.GOOD and p.detail.get("reproduced") is False for p in self.probes)
        confirmed = [f"the culprit was then judged {p.reason}" for p in self.probes if p.role == "confirm"]
        if guessed and self.status == "found" and "n_runs" not in self.extra:   # short-run, not --flaky
            lines.append(f"{guessed} good verdicts rest on runs unlike GOOD's on the same seeds (the random stream "
                         "changed): each is a test at the seed spread, and together they can name a wrong commit; "
                         + (confirmed or ["--flaky with a --metric pools the runs across commits instead"])[0])
        if self.diagnosis.get("rows"):
            lines.append(render_diagnosis(self.diagnosis, terms=self.terms or ("good", "bad")))
        lines += [f"diagnose could not run: {self.diagnosis['error']}"] if self.diagnosis.get("error") else []
        cached = [p for p in self.probes if p.cached]
        when = sorted(p.recorded[:16].replace("T", " ") for p in cached if p.recorded)
        recorded = f" {when[0]}" + (f" to {when[-1]}" if when[-1] != when[0] else "") if when else ""
        if "n_runs" in self.extra and self.status != "aborted":   # --flaky (an abort: the probes, uncounted)
            lines.append(f"{self.extra['n_runs']} predicate runs"
                         + (f" (+{len(cached)} recorded{recorded})" if cached else "")
                         + (f" in {self.rounds} rounds" if 0 < self.rounds < self.extra["n_runs"] else "")
                         + f" in {self.total_seconds:.1f}s")
        else:
            checks = sum(p.role == "verify" for p in self.probes)
            lines.append(f"{sum(p.role != 'confirm' for p in self.probes) - checks} probes ({len(cached)} cached"
                         + (f", recorded{recorded}" if recorded else "") + ")"
                         + (f" in {self.rounds} rounds" if self.strategy == "k-ary" else "")
                         + (f" and {checks} verification runs" if checks else "")
                         + f" in {self.total_seconds:.1f}s")
        return "\n".join(lines)

    def markdown(self, plot: Path | None = None) -> str:
        """A markdown report: result, probes and outputs, the log; ``plot``: from the report's folder."""
        out = [f"# rlbisect: {self.good[:10]}..{self.bad[:10]}", "",
               f"- status: **{self.status}** (exit {self.exit_code})",
               f"- predicate: `{self.predicate}`", f"- search: {self.strategy}",
               f"- first parent only: {'yes' if self.first_parent else 'no'}", ""]
        if self.status == "found" and self.first_bad:
            out += [f"## First {self.new} commit: `{self.first_bad}`", ""]
            out += [ln.strip() for ln in self._commit_lines(self.first_bad)] + [""]
        elif self.candidates:
            out += ["## Candidates (the first bad commit is one of these)", ""]
            out += [f"- `{s}` {self.subject(s)}" for s in self.candidates] + [""]
        if self.message:
            out += [f"> {self.message}", ""]
        if self.extra.get("posterior"):
            out += ["## Posterior of the first bad commit (--flaky)", ""]
            out += [f"- `{r['commit']}` {r['p']:.3f}" for r in self.extra["posterior"]] + [""]
        out += [f"![what the bisect ran]({plot.as_posix()})", ""] if plot is not None else []
        out += ["## Probes", "", "| # | commit | verdict | seconds | values | reason | subject |",
                "|---|---|---|---|---|---|---|"]
        for p in self.probes:
            vals = ", ".join(f"{k}={v:g}" for k, v in list(p.values.items())[:8]) + \
                (f", ... ({len(p.values) - 8} more in the JSON)" if len(p.values) > 8 else "")
            reason = (f"{p.role}: " if p.role else "") + p.reason + (" (cached)" if p.cached else "")
            out.append(f"| {p.order} | `{p.commit[:10]}` | {said(p)} | {p.seconds:.2f} | {vals} "
                       f"| {reason.replace('|', '/')} | {p.subject.replace('|', '/')} |")
        judged = [p for p in self.probes if p.detail.get("metrics")]
        if judged:
            out += ["", "## Evidence: per-seed scores at GOOD and at each probe", ""]
            for p in judged:
                out += [f"- [{p.order}] `{p.commit[:10]}` {p.verdict}:"]
                out += [f"  - {ln}" for ln in evidence_lines(p.detail)]
        failing = [p for p in self.probes if p.output and p.verdict != "good"]
        if failing:
            out += ["", "## Predicate output of the probes that did not pass", ""]
            for p in failing:
                # longer than any run of backticks in the output: it cannot close it early
                fence = "`" * max([3, *(len(run) + 1 for run in re.findall("`+", p.output))])
                out += [f"### [{p.order}] `{p.commit[:10]}` {p.verdict}", "", fence, p.output, fence, ""]
        if self.diagnosis.get("rows"):
            out += ["", "## Diagnose: first bad commit vs its parent", "", "```",
                    render_diagnosis(self.diagnosis, terms=self.terms or ("good", "bad")), "```"]
        out += ["", "## git bisect log", "", "Replay with `git bisect replay FILE`.", "", "```",
                self.bisect_log.rstrip(), "```", ""]
        return "\n".join(out)


def _object(identity: str) -> Any:
    """The predicate's identity as the JSON object it is (a string only if it is not JSON)."""
    try:
        return json.loads(identity)
    except ValueError:
        return identity


class Progress:
    """What the driver tells its caller as it goes: ``status``, a line describing what runs now;
    ``probe``, a probe that finished (or was recalled from the cache). The default says nothing."""

    def status(self, text: str) -> None: ...
    def probe(self, record: ProbeRecord) -> None: ...


def shown_evidence(detail: dict, limit: int = 3) -> list[dict]:
    """The per-metric evidence worth showing: the metrics that decided, else the most-moved one."""
    tests = detail.get("metrics") or []
    return [t for t in tests if t.get("decides")][:limit] or tests[:1]


def evidence_lines(detail: dict, limit: int = 3) -> list[str]:
    """Per-seed values of the metrics that decided a short-run probe (else the most-moved one)."""
    return [f"{t['metric']}{' (decides)' if t.get('decides') else ''}: GOOD {' '.join(f'{x:.4g}' for x in t['good'])}"
            f" | this commit {' '.join(f'{x:.4g}' for x in t['probe'])}  (p={t['p']:.2g})"
            for t in shown_evidence(detail, limit)]


def said(rec: ProbeRecord) -> str:
    """A probe's verdict in words: a fix search's terms, and "ran" for a measured run (a number)."""
    return "ran" if rec.cause is Cause.MEASURED and rec.verdict is Verdict.GOOD else rec.term or rec.verdict


def probe_line(rec: ProbeRecord) -> str:
    """One line per probe: order, short sha, verdict, seconds, subject, reason."""
    extra = [x for x in (rec.role, rec.reason) if x] + ["cached"] * rec.cached
    tail = f"  ({'; '.join(extra)})" if extra else ""
    return f"[{rec.order}] {rec.commit[:10]}  {said(rec):<5} {rec.seconds:7.2f}s  {rec.subject}{tail}"
