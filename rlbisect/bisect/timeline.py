"""The bisect as pictures: a timeline of the probes, and the culprit's seeds against GOOD's."""

from __future__ import annotations

from pathlib import Path

from rlbisect.bisect.report import BisectResult, shown_evidence
from rlbisect.plots import VERDICT_COLOURS, plt, seed_spread


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
    shown = []
    for name in names:
        for probe, title in ((parent, "parent"), (culprit, "first bad")):
            t = next((t for t in (probe.detail.get("metrics", []) if probe else []) if t["metric"] == name), None)
            if t is not None and probe is not None:
                shown.append((f"{title} {probe.commit[:7]}", name, t["good"], t["probe"], t["decides"]))
    return seed_spread(shown, path, labels=("GOOD", "commit"), cols=2 if parent else 1,
                       share_rows=parent is not None)
