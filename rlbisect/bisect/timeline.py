"""The bisect as pictures: the probes' timeline and the culprit's seeds, or a noisy search's runs.

A plain bisect draws its probes in order and, for short runs, the culprit's seeds against GOOD's;
a noisy search (``--flaky``) draws the runs at each commit and the culprit's posterior."""

from __future__ import annotations

import math
from pathlib import Path

from rlbisect.bisect.report import BisectResult, shown_evidence
from rlbisect.errors import Cause
from rlbisect.plots import FAULTY, HEALTHY, VERDICT_COLOURS, plt, seed_spread

NOISY = ("posterior", "measured")   #: the strategies whose probes are runs, not verdicts


def draw(result: BisectResult, path: Path) -> list[tuple[Path, str]]:
    """``--plot``: the figures for this bisect, each with what it shows (empty for the main one)."""
    if result.strategy in NOISY:   # a row per run would be hundreds of rows of one colour
        return [(noisy_runs(result, path), "")]
    out = [(bisect_timeline(result, path), "")]
    evidence = path.with_name(path.stem + "-evidence.png")
    if bisect_evidence(result, evidence):
        out.append((evidence, "GOOD's seeds vs the first bad commit's and its parent's"))
    return out


def timeline_rows(probes) -> list[int]:
    """The row (1, 2, ...) each probe is drawn on: one per round, so the probes of a ``--jobs``
    round share a row and a sequential bisect gets one row per probe."""
    rows, key, row = [], None, 0
    for p in probes:
        k = ("cached", p.order) if p.cached or not p.round else ("round", p.round)
        if k != key:
            key, row = k, row + 1
        rows.append(row)
    return rows


def bisect_timeline(result: BisectResult, path: str | Path) -> Path:
    """PNG timeline: commits in history order along x, rounds down y, coloured by verdict.

    Untested commits are hollow grey rings, skipped ones filled grey; a round of ``--jobs``
    probes shares a row; the first bad commit is a dashed line labelled beside it, and a
    list of candidates (no single answer) is a shaded band."""
    order = [sha for sha, _ in result.history] or [result.good, result.bad]
    pos = {sha: i for i, sha in enumerate(order)}
    rows = timeline_rows(result.probes)
    depth = max(rows, default=0)
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, 0.25 * len(order) + 4)), 2.2 + 0.35 * depth))
    ax.scatter(range(len(order)), [0] * len(order), s=14, facecolors="none", edgecolors="#9e9e9e",
               lw=0.8, zorder=1)
    for sha, colour in ((result.good, "good"), (result.bad, "bad")):
        ax.scatter([pos[sha]], [0], marker="s", s=60, color=VERDICT_COLOURS[colour], zorder=3)
    path_x: dict[int, list[int]] = {}
    for p, y in zip(result.probes, rows):
        x = pos.get(p.commit, 0)
        path_x.setdefault(y, []).append(x)
        ax.scatter([x], [y], s=70, color=VERDICT_COLOURS.get(p.verdict, "k"), zorder=3,
                   edgecolors="black" if p.cached else "none")
        ax.annotate(f"{p.order}: {p.commit[:7]}" + (f" ({p.role})" if p.role else ""), (x, y),
                    textcoords="offset points", xytext=(6, 4), fontsize=7)
    for y, xs in path_x.items():   # a round's probes joined, rounds joined in turn
        ax.plot([min(xs), max(xs)], [y, y], color="#9e9e9e", lw=0.8, zorder=1)
    firsts = [(xs[0], y) for y, xs in sorted(path_x.items())]
    ax.plot([x for x, _ in firsts], [y for _, y in firsts], color="#757575", lw=0.8, ls=":", zorder=1)
    if result.first_bad in pos:
        x = pos[result.first_bad]
        ax.axvline(x, color=VERDICT_COLOURS["bad"], ls="--", lw=1.5, zorder=0)
        left = x < 0.7 * len(order)   # the label beside the line, never across it
        ax.annotate(f"first bad {result.first_bad[:7]}", (x, depth + 0.7), xytext=(5 if left else -5, 0),
                    textcoords="offset points", color=VERDICT_COLOURS["bad"], fontsize=8,
                    ha="left" if left else "right", va="center")
    elif result.candidates:
        cx = [pos[c] for c in result.candidates if c in pos]
        if cx:
            ax.axvspan(min(cx) - 0.5, max(cx) + 0.5, color="#ffcc80", alpha=0.4, zorder=0)
    ax.set_xlabel("commits, oldest (GOOD) to newest (BAD)")
    ax.set_ylabel("round" if result.strategy == "k-ary" else "probe")
    ax.set_ylim(-0.7, depth + 1.3)
    ax.set_yticks(range(depth + 1), ["history", *map(str, range(1, depth + 1))], fontsize=8)
    ax.set_xlim(-1, len(order))
    ax.invert_yaxis()
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v) for v, c in
               VERDICT_COLOURS.items() if v != "abort" or any(p.verdict == v for p in result.probes)]
    handles.append(plt.Line2D([], [], marker="o", ls="", markerfacecolor="none",
                              markeredgecolor="#9e9e9e", label="not tested"))
    ax.legend(handles=handles, loc="lower left", fontsize=7, frameon=False, ncol=len(handles))
    ax.set_title(f"bisect ({result.strategy}): {result.status}, {len(result.probes)} probes"
                 + (f" in {result.rounds} rounds" if result.strategy == "k-ary" else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def bisect_evidence(result: BisectResult, path: str | Path) -> Path | None:
    """For a short-run bisect: GOOD's seeds vs the first bad commit's and its parent's, on the
    metrics that decided (None when the culprit carries no per-seed evidence)."""
    culprit = next((p for p in result.probes if p.commit == result.first_bad and p.detail), None)
    if culprit is None or result.first_bad is None:
        return None
    parents = dict(result.history).get(result.first_bad, ())
    parent = next((p for p in result.probes if p.commit in parents and p.detail), None)
    names = [t["metric"] for t in shown_evidence(culprit.detail)]
    if not names:   # a measured search's run, or a probe without per-seed scores
        return None
    shown = []
    for name in names:
        for probe, title in ((parent, "parent"), (culprit, "first bad")):
            t = next((t for t in (probe.detail.get("metrics", []) if probe else []) if t["metric"] == name), None)
            if t is not None and probe is not None:
                shown.append((f"{title} {probe.commit[:7]}", name, t["good"], t["probe"], t["decides"]))
    return seed_spread(shown, path, labels=("GOOD", "commit"), cols=2 if parent else 1,
                       share_rows=parent is not None)


def measured_points(result: BisectResult, metric: str) -> list[tuple[str, float]]:
    """(commit, value) of every run a measured search used: its own, and the per-seed runs of the
    per-commit probes it started from (a short-run bisect that switched); a crash is -inf or +inf,
    whichever is the worst outcome, as the search reads it."""
    from rlbisect.bisect.predicates.short_run import drawn_runs
    worst = math.inf if result.extra.get("direction") == "higher" else -math.inf
    earlier = [p for p in result.probes if p.role == "per-commit"]
    out = [(c, float(p.values[metric])) for c, p in drawn_runs(earlier, result.good, metric)]
    for p in result.probes:
        if p.role == "per-commit" or p.verdict in ("skip", "abort"):
            continue
        out.append((p.commit, float(p.values[metric]) if p.cause is Cause.MEASURED else worst))
    return out


def noisy_runs(result: BisectResult, path: str | Path) -> Path:
    """PNG for a noisy search: above, every run at its commit (a measured search: its value, a crash
    as an x at the worst edge; a binary one: passes and fails counted); below, the posterior of the
    likeliest culprits. Commits in history order along x; the first bad commit, when named, splits
    the runs into its two sides' colours."""
    order = [sha for sha, _ in result.history] or [result.good, result.bad]
    pos = {sha: i for i, sha in enumerate(order)}
    culprit = pos.get(result.first_bad) if result.status == "found" and result.first_bad else None
    metric = result.extra.get("metric")
    fig, (top, low) = plt.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.3]},
                                   figsize=(max(6.0, min(16.0, 0.2 * len(order) + 4)), 5.2))

    def side(i: int) -> str:
        return "#616161" if culprit is None else HEALTHY if i < culprit else FAULTY
    if metric is not None:
        runs = _values_panel(top, result, metric, pos, side, culprit)
    else:
        runs = _counts_panel(top, result, pos, culprit)
    others = []
    for row in result.extra.get("posterior") or []:
        if row["commit"] in pos:
            low.bar([pos[row["commit"]]], [row["p"]], width=0.8, color=side(pos[row["commit"]]))
        elif row["p"] >= 0.001:   # "nothing changed", "GOOD already bad": answers, not commits
            others.append(f"{row['commit']}: {row['p']:.3f}")
    if others:
        low.text(0.01, 0.93, "; ".join(others), transform=low.transAxes, fontsize=7, va="top")
    low.set_ylim(0, 1.05)
    low.set_ylabel("posterior\nof the culprit", fontsize=8)
    for ax in (top, low):
        ax.grid(axis="y", alpha=0.3)
        if culprit is not None:
            ax.axvline(culprit - 0.5, color=FAULTY, ls=":", lw=1, zorder=1)
    ticks = sorted({0, len(order) - 1} | ({culprit} if culprit is not None else set()))
    names = {0: "GOOD", len(order) - 1: "BAD", culprit: "first bad"}
    low.set_xticks(ticks, [f"{names[t]}\n{order[t][:7]}" for t in ticks], fontsize=7)
    low.set_xticks(range(len(order)), minor=True)
    low.set_xlim(-1, len(order))
    low.set_xlabel("commits, oldest (GOOD) to newest (BAD)", fontsize=8)
    fig.suptitle(f"{'measured' if metric else 'noisy'} search: {result.status.value}, {runs} runs"
                 + (f", first bad {order[culprit][:7]}" if culprit is not None else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def _values_panel(ax, result: BisectResult, metric: str, pos: dict, side, culprit: int | None) -> int:
    """Each run's value at its commit, each side's median dashed; the number of runs drawn."""
    points = [(pos[c], v) for c, v in measured_points(result, metric) if c in pos]
    finite = [v for _, v in points if math.isfinite(v)] or [0.0]
    lo, hi = min(finite), max(finite)
    pad = 0.08 * (hi - lo or 1.0)
    seen: dict[int, int] = {}
    for x, v in points:
        seen[x] = seen.get(x, 0) + 1
        dx = 0.3 * math.sin(seen[x] * 2.4)    # runs at one commit spread sideways, never stacked
        if math.isfinite(v):
            ax.scatter([x + dx], [v], s=14, color=side(x), alpha=0.75, zorder=3, lw=0)
        else:
            ax.scatter([x + dx], [lo - pad if v < 0 else hi + pad], marker="x", s=22, color=side(x), zorder=3)
    sides = result.extra.get("sides") or {}
    if culprit is not None and all(sides.get(k, {}).get("runs") for k in ("before", "after")):
        ax.hlines(sides["before"]["median"], -0.5, culprit - 0.5, color=side(0), ls="--", lw=1.2, zorder=2)
        ax.hlines(sides["after"]["median"], culprit - 0.5, len(pos) - 0.5, color=side(culprit), ls="--",
                  lw=1.2, zorder=2)
    ax.set_ylim(lo - 2 * pad, hi + 2 * pad)
    ax.set_ylabel(f"{metric}, one dot a run", fontsize=8)
    return len(points)


def _counts_panel(ax, result: BisectResult, pos: dict, culprit: int | None) -> int:
    """Each commit's passes stacked on its fails, and the two sides' failure rates; the runs."""
    xs = sorted({pos[p.commit] for p in result.probes if p.commit in pos})
    at = {x: [p.verdict for p in result.probes if pos.get(p.commit) == x] for x in xs}
    fails, passes = [at[x].count("bad") for x in xs], [at[x].count("good") for x in xs]
    ax.bar(xs, fails, color=VERDICT_COLOURS["bad"], width=0.8, label="failed")
    ax.bar(xs, passes, bottom=fails, color=VERDICT_COLOURS["good"], width=0.8, label="passed")
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    ax.set_ylabel("runs", fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    rates = result.extra.get("rates") or {}
    if culprit is not None and rates:
        ax.set_title(f"failure rate before {rates['before']['mean']:.2f}, from the first bad commit on "
                     f"{rates['after']['mean']:.2f}", fontsize=8)
    return len(result.probes)
