"""The bisect report: text lines as probes finish, JSON, markdown and a PNG timeline.

JSON (``--json FILE``) keys: ``good``, ``bad``, ``first_bad`` (null unless found),
``candidates``, ``n_probes``, ``probes`` (each ``commit``, ``verdict``, ``seconds``, ``values``,
plus ``reason``, ``cached``, ``subject``, ``tree``, ``overhead``), ``bisect_log``, and
``status``, ``exit_code``, ``message``, ``predicate``, ``first_parent``, ``diagnosis`` (after a
find: the first bad commit's values against its parent's, biggest movers first). Commits are full ids.
With ``--flaky`` also ``posterior`` (top candidates: ``commit``, ``p``), ``n_runs``, ``outcome``,
``confidence``, ``max_runs``, ``flip_rate`` (see :mod:`rlbisect.bisect.flaky`).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rlbisect.bisect.diagnose import render as render_diagnosis
from rlbisect.bisect.runner import BisectResult, ProbeRecord

VERDICT_COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#9e9e9e", "abort": "#6a1b9a"}


def probe_line(rec: ProbeRecord) -> str:
    """One line per probe: order, short sha, verdict, seconds, subject, reason."""
    extra = [rec.reason] if rec.reason else []
    if rec.cached:
        extra.append("cached")
    tail = f"  ({'; '.join(extra)})" if extra else ""
    return (f"[{rec.order}] {rec.commit[:10]}  {rec.verdict:<5} {rec.seconds:7.2f}s  "
            f"{rec.subject}{tail}")


def summary(result: BisectResult) -> str:
    """What was found, as git would say it, plus the probe count."""
    if getattr(result, "posterior", None) is not None:  # --flaky: the posterior says it
        from rlbisect.bisect.flaky import summary as flaky_summary
        return flaky_summary(result)  # type: ignore[arg-type]
    lines = []
    n_cached = sum(p.cached for p in result.probes)
    if result.status == "found" and result.first_bad:
        c = result.commits.get(result.first_bad)
        lines.append(f"{result.first_bad} is the first bad commit")
        if c:
            lines += [f"    {c.subject}", f"    author: {c.author}  date: {c.date}"]
    elif result.candidates and result.status in ("ambiguous", "aborted", "interrupted"):
        head = {"ambiguous": "There are only 'skip'ped commits left to test.\n"
                             "The first bad commit could be any of:",
                "aborted": f"{result.message}\nThe first bad commit is still one of:",
                "interrupted": f"{result.message}\nThe first bad commit is still one of:"}
        lines.append(head[result.status])
        # git lists every candidate of a skip-only ending; a stopped run may have thousands
        shown = result.candidates if result.status == "ambiguous" else result.candidates[:10]
        for sha in shown:
            c = result.commits.get(sha)
            lines.append(f"{sha}  {c.subject if c else ''}".rstrip())
        if len(shown) < len(result.candidates):
            lines.append(f"... and {len(result.candidates) - len(shown)} more")
    if result.diagnosis.get("rows"):
        lines.append(render_diagnosis(result.diagnosis))
    lines.append(f"{len(result.probes)} probes ({n_cached} cached) in {result.total_seconds:.1f}s")
    return "\n".join(lines)


def to_json(result: BisectResult) -> dict:
    """The JSON document of a result (see the module docstring for the keys)."""
    return {
        "good": result.good, "bad": result.bad,
        "first_bad": result.first_bad if result.status == "found" else None,
        "candidates": result.candidates, "n_probes": len(result.probes),
        "probes": [{"commit": p.commit, "verdict": p.verdict, "seconds": round(p.seconds, 4),
                    "values": p.values, "reason": p.reason, "cached": p.cached,
                    "subject": p.subject, "tree": p.tree, "overhead": round(p.overhead, 4)}
                   for p in result.probes],
        "bisect_log": result.bisect_log, "status": result.status,
        "exit_code": result.exit_code, "message": result.message,
        "predicate": result.predicate, "first_parent": result.first_parent,
        "diagnosis": result.diagnosis,
        **(result.json_extra() if hasattr(result, "json_extra") else {}),  # --flaky: posterior
    }


def write_json(result: BisectResult, path: Path) -> None:
    """Write :func:`to_json` to ``path``."""
    path.write_text(json.dumps(to_json(result), indent=2) + "\n")


def to_markdown(result: BisectResult, plot: Path | None = None) -> str:
    """A markdown report: result, every probe, candidates, the replayable bisect log."""
    out = [f"# rlbisect: {result.good[:10]}..{result.bad[:10]}", "",
           f"- status: **{result.status}** (exit {result.exit_code})",
           f"- predicate: `{result.predicate}`",
           f"- first parent only: {'yes' if result.first_parent else 'no'}", ""]
    if result.status == "found" and result.first_bad:
        c = result.commits.get(result.first_bad)
        out += [f"## First bad commit: `{result.first_bad}`", ""]
        if c:
            out += [f"{c.subject}", "", f"Author: {c.author}, {c.date}", ""]
    elif result.candidates:
        out += ["## Candidates (the first bad commit is one of these)", ""]
        out += [f"- `{s}` {result.commits[s].subject if s in result.commits else ''}"
                for s in result.candidates] + [""]
    if result.message:
        out += [f"> {result.message}", ""]
    if getattr(result, "posterior", None):
        out += ["## Posterior of the first bad commit (--flaky)", ""]
        out += [f"- `{r['commit']}` {r['p']:.3f}" for r in result.posterior] + [""]
    if plot is not None:
        out += [f"![bisect timeline]({plot.name})", ""]
    out += ["## Probes", "", "| # | commit | verdict | seconds | values | reason | subject |",
            "|---|---|---|---|---|---|---|"]
    for p in result.probes:
        vals = ", ".join(f"{k}={v:g}" for k, v in p.values.items())
        reason = p.reason + (" (cached)" if p.cached else "")
        out.append(f"| {p.order} | `{p.commit[:10]}` | {p.verdict} | {p.seconds:.2f} | {vals} "
                   f"| {reason} | {p.subject.replace('|', '/')} |")
    if result.diagnosis.get("rows"):
        out += ["", "## Diagnose: first bad commit vs its parent", "", "```", render_diagnosis(result.diagnosis), "```"]
    out += ["", "## git bisect log", "", "Replay with `git bisect replay FILE`.", "", "```",
            result.bisect_log.rstrip(), "```", ""]
    return "\n".join(out)


def write_plot(result: BisectResult, path: Path) -> None:
    """PNG timeline: commits in history order along x, probe order along y, coloured by verdict."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [sha for sha, _ in result.history] or [result.good, result.bad]
    pos = {sha: i for i, sha in enumerate(order)}
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, 0.25 * len(order) + 4)), 3.5))
    ax.scatter(range(len(order)), [0] * len(order), s=8, color="#bdbdbd", zorder=1)
    ax.scatter([pos[result.good]], [0], marker="s", s=60, color=VERDICT_COLOURS["good"], zorder=3)
    ax.scatter([pos[result.bad]], [0], marker="s", s=60, color=VERDICT_COLOURS["bad"], zorder=3)
    xs = [pos.get(p.commit, 0) for p in result.probes]
    ys = [p.order for p in result.probes]
    ax.plot(xs, ys, color="#757575", lw=0.8, zorder=1)
    for p, x, y in zip(result.probes, xs, ys):
        ax.scatter([x], [y], s=70, color=VERDICT_COLOURS.get(p.verdict, "k"), zorder=3,
                   edgecolors="black" if p.cached else "none")
        ax.annotate(f"{p.order}: {p.commit[:7]}", (x, y), textcoords="offset points",
                    xytext=(6, 4), fontsize=7)
    if result.first_bad in pos:
        ax.axvline(pos[result.first_bad], color=VERDICT_COLOURS["bad"], ls="--", lw=1.5)
        ax.annotate(f"first bad {result.first_bad[:7]}", (pos[result.first_bad], len(ys) + 0.5),
                    color=VERDICT_COLOURS["bad"], fontsize=8, ha="center")
    elif result.candidates:
        cx = [pos[c] for c in result.candidates if c in pos]
        if cx:
            ax.axvspan(min(cx) - 0.5, max(cx) + 0.5, color="#ffcc80", alpha=0.4, zorder=0)
    ax.set_xlabel("commits, oldest (GOOD) to newest (BAD)")
    ax.set_ylabel("probe order")
    ax.set_ylim(-0.7, len(ys) + 1.2)
    ax.set_xlim(-1, len(order))
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v)
               for v, c in VERDICT_COLOURS.items() if v != "abort"]
    ax.legend(handles=handles, loc="upper left", fontsize=7, frameon=False)
    ax.set_title(f"bisect: {result.status}, {len(ys)} probes", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@contextmanager
def live_progress(enabled: bool = True) -> Iterator[tuple]:
    """Yield ``(on_status, on_probe)`` callbacks: a rich spinner on stderr, probe lines on stdout.

    When stdout and stderr are the same terminal the probe lines go through the spinner's
    console so the two do not garble each other; otherwise they are plain stdout lines.
    """
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield (lambda text: None), (lambda rec: print(probe_line(rec), flush=True))
        return
    same_tty = sys.stdout.isatty()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console, transient=True, redirect_stdout=False,
                        redirect_stderr=False)
    task = progress.add_task("starting the bisect", total=None)

    def on_probe(rec: ProbeRecord) -> None:
        if same_tty:
            progress.console.print(probe_line(rec), markup=False, highlight=False)
        else:
            print(probe_line(rec), flush=True)

    with progress:
        yield (lambda text: progress.update(task, description=text)), on_probe


def run_and_report(range_spec: str, command: list[str], *, repo: Path = Path("."),
                   predicate: str | None = None, first_parent: bool = False,
                   jobs: int = 1, executor: str = "local", ray_address: str | None = None,
                   ray_gpus: float = 0.0, clone_url: str | None = None,
                   timeout: float | None = None, json_path: Path | None = None,
                   report_path: Path | None = None, plot_path: Path | None = None,
                   use_cache: bool = True, options: dict[str, str] | None = None,
                   flaky: bool = False, confidence: float = 0.95,
                   max_runs: int | None = None) -> int:
    """What ``rlbisect run`` does: bisect, print, write the requested files, return the exit code.

    With ``flaky`` the search is :func:`rlbisect.bisect.flaky.run_flaky` (``confidence``,
    ``max_runs``); exit 3 then also means "not sure within the run budget".
    With ``jobs`` > 1 or ``executor`` "ray" it is :func:`rlbisect.bisect.parallel.run_parallel`.

    Exit codes: 0 first bad commit found; 3 only skipped candidates left; 2 bad input
    (nothing changed); 4 the predicate aborted; 1 an unexpected git failure; 128+N on signal N.
    """
    from rlbisect.bisect.predicates import PredicateError, make_predicate
    from rlbisect.bisect.repo import BisectInputError, RepoError
    from rlbisect.bisect.runner import BisectInterrupted, run_bisect

    def fail(msg: str, code: int) -> int:
        print(f"rlbisect run: {msg}", file=sys.stderr)
        return code

    if timeout is not None and timeout <= 0:
        return fail("--timeout must be a positive number of seconds", 2)
    try:
        pred = make_predicate(predicate, command, **(options or {}))
        bisect = run_bisect   # or the parallel or the flaky search, chosen below
        if jobs > 1 or executor != "local" or ray_address or ray_gpus or clone_url:
            if flaky:
                return fail("--flaky runs one probe at a time: drop --jobs/--executor", 2)
            from rlbisect.bisect.parallel import parallel_runner
            bisect = parallel_runner(jobs, executor, ray_address=ray_address, ray_gpus=ray_gpus, clone_url=clone_url)
        with live_progress() as (on_status, on_probe):
            if flaky:
                from functools import partial

                from rlbisect.bisect.flaky import run_flaky
                bisect = partial(run_flaky, confidence=confidence, max_runs=max_runs)
            result = bisect(repo, range_spec, pred, first_parent=first_parent,
                                timeout=timeout, use_cache=use_cache, on_probe=on_probe,
                                on_status=on_status)
    except (PredicateError, BisectInputError) as e:
        return fail(str(e), 2)
    except RepoError as e:
        return fail(str(e), 1)
    except BisectInterrupted as e:
        result = e.result
    for path, write in ((json_path, write_json), (plot_path, write_plot)):
        if path is not None:
            write(result, path)
    if report_path is not None:
        report_path.write_text(to_markdown(result, plot_path))
    print(summary(result))
    return result.exit_code
