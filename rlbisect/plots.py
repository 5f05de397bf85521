"""Figures a person would rather look at than read: the dashboard and the check matrix (PNG)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .metrics import DEFAULT_PANELS, METRICS  # noqa: E402

HEALTHY, FAULTY = "#1f77b4", "#d62728"


def dashboard(runs: dict[str, list[dict]], path: str | Path, metrics: tuple[str, ...] = DEFAULT_PANELS,
              healthy: str | None = None) -> Path:
    """One column per run: training reward on top, the chosen metrics below, the healthy run in blue
    drawn beside each other run in red (the healthy run is the first, unless `healthy` names one)."""
    names = list(runs)
    healthy = healthy if healthy is not None else names[0]
    shown = [n for n in names if n != healthy] or [healthy]
    metrics = [m for m in metrics if any(m in r for rows in runs.values() for r in rows)]
    panels = ["reward"] + metrics
    fig, axes = plt.subplots(len(panels), len(shown), figsize=(3.6 * len(shown), 1.9 * len(panels)),
                             sharex="col", squeeze=False)
    for col, name in enumerate(shown):
        for row, key in enumerate(panels):
            ax = axes[row][col]
            for run_name, color in ((healthy, HEALTHY), (name, FAULTY)):
                rows = [r for r in runs[run_name] if key in r]
                if rows and not (run_name == name == healthy and color == FAULTY):
                    ax.plot([r["step"] for r in rows], [r[key] for r in rows], color=color, lw=1.6,
                            marker="o" if len(rows) < 4 else None, ms=3, label=run_name)
            positive = [r[key] for rr in runs.values() for r in rr if key in r and r[key] > 0]
            if key in METRICS and METRICS[key].group == "consistency" and positive and \
                    max(positive) / max(min(positive), 1e-30) > 1e3:
                ax.set_yscale("log")
            ax.set_ylabel(key, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(name if name == healthy else f"{name} vs {healthy}", fontsize=9)
                ax.legend(fontsize=7, loc="best")
        axes[-1][col].set_xlabel("step", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def check_matrix(matrix: dict[str, dict], path: str | Path) -> Path:
    """Heatmap of the invariant checks: rows = faults, columns = checks, red = FAIL, values in cells.
    `matrix` is {row: {check: {"value", "passed"}}} (the `check --matrix --json` shape)."""
    rows = list(matrix)
    checks = list(next(iter(matrix.values())))
    fig, ax = plt.subplots(figsize=(1.25 * len(checks) + 2.2, 0.55 * len(rows) + 2.2))
    for i, row in enumerate(rows):
        for j, check in enumerate(checks):
            cell = matrix[row][check]
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color="#f4a6a6" if not cell["passed"] else "#c9e8c4"))
            v = cell["value"]
            text = "nan" if isinstance(v, float) and math.isnan(v) else f"{v:.2g}"
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8,
                    fontweight="bold" if not cell["passed"] else "normal")
    ax.set_xlim(0, len(checks))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(checks))])
    ax.set_xticklabels([f"{j + 1}. {c}" for j, c in enumerate(checks)], rotation=35, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=9)
    ax.set_title("Which invariant catches which fault (red = FAIL; cells show the measured value)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
