"""bench_flaky.py's frontier figure: wrong answers against runs, one point per --confidence level."""

from __future__ import annotations

from pathlib import Path


def plot_frontier(points_by_case: dict[str, dict[str, list[tuple]]], tools: tuple[str, ...], path: Path,
                  histories: int) -> None:
    """Per case (its label -> per tool, (confidence, mean runs, wrong answers) per level): wrong
    answers against mean runs, each point labelled with its level."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 3
    rows = -(-len(points_by_case) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, (label, points) in zip(axes.flat, points_by_case.items()):
        # rlbisect's levels above its points, the peer's below: on the clean rows both lie at 0
        for t, style, dy in zip(tools, ("o-", "s--"), (5, -11)):
            pts = points[t]
            ax.plot([p[1] for p in pts], [100 * p[2] / histories for p in pts], style, label=t)
            for level, runs, wrong in pts:
                ax.annotate(f"{level:g}", (runs, 100 * wrong / histories), fontsize=7,
                            textcoords="offset points", xytext=(0, dy), ha="center")
        ax.axhline(100 / 40, color="grey", lw=0.8, ls=":")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("mean predicate runs")
        ax.set_ylabel("wrong culprit named (%)")
    for ax in list(axes.flat)[len(points_by_case):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"--flaky vs git-bayesect: each point one --confidence level, {histories} "
                 "histories per case (dotted: 1 in 40)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
