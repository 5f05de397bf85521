"""Figures a person would rather look at than read: the dashboard, the check matrix, seed spreads.

The bisect timeline is drawn by :mod:`rlbisect.bisect.timeline` with the same colours."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rlbisect.metrics import DEFAULT_PANELS, METRICS  # noqa: E402

HEALTHY, FAULTY = "#1f77b4", "#d62728"
VERDICT_COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#9e9e9e", "abort": "#6a1b9a"}


def load_runs(paths: list[str]) -> dict[str, list[dict]]:
    """Runs written by ``rlbisect train --out``, named by the shortest path suffix that tells
    them apart (two ``run.jsonl`` in different folders stay two runs)."""
    from rlbisect.errors import InputError
    rows: dict[Path, list[dict]] = {}
    for path in map(Path, paths):
        try:
            rows[path] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except ValueError as e:   # a CSV, a log: say what the file should be, not only where JSON broke
            raise InputError(f"{path}: not a run written by `rlbisect train --out` (JSON lines): "
                             f"{e}".splitlines()[0]) from None
        if not rows[path] or not isinstance(rows[path][0], dict) or not {"step", "reward"} <= rows[path][0].keys():
            raise InputError(f"{path}: not a run written by `rlbisect train --out` (no step and reward columns)")
        # a value that is no number (null, "n/a") is not drawn; a row must say its step
        rows[path] = [{k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                      if isinstance(r, dict) else {} for r in rows[path]]
        if (i := next((i for i, r in enumerate(rows[path]) if "step" not in r), None)) is not None:
            raise InputError(f"{path}: row {i + 1} has no numeric step")

    def names(depth: int, suffix: bool) -> list[str]:
        return ["/".join((p if suffix else p.with_suffix("")).parts[-depth:]) for p in rows]
    for suffix in (False, True):   # x.jsonl and x.json are two runs: their suffixes tell them apart
        depth = 1
        while len(set(names(depth, suffix))) < len(rows) and depth < max(len(p.parts) for p in rows):
            depth += 1
        if len(set(names(depth, suffix))) == len(rows):
            break
    return dict(zip(names(depth, suffix), rows.values()))


def panels(metrics: str | None) -> tuple[str, ...]:
    """The metrics under the reward panel: ``a,b,c`` (each a known metric) or the default set."""
    from rlbisect.errors import InputError
    if not metrics:
        return DEFAULT_PANELS
    chosen = tuple(m.strip() for m in metrics.split(",") if m.strip())
    unknown = [m for m in chosen if m not in METRICS]
    if unknown or not chosen:
        raise InputError(f"--metrics: unknown metric {unknown[0] if unknown else '(none)'!r}; "
                         f"known: {', '.join(METRICS)}")
    return chosen


def dashboard(runs: dict[str, list[dict]], path: str | Path, metrics: tuple[str, ...] = DEFAULT_PANELS,
              healthy: str | None = None) -> Path:
    """One column per run: training reward on top, the chosen metrics below, the healthy run in blue
    drawn beside each other run in red (the healthy run is the first, unless `healthy` names one)."""
    names = list(runs)
    healthy = healthy if healthy is not None else names[0]
    shown = [n for n in names if n != healthy] or [healthy]
    panels = ["reward"] + [m for m in metrics if any(m in r for rows in runs.values() for r in rows)]
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
                elif key == "reward":   # a reward logged as null or a string: said where it would be
                    ax.text(0.5, 0.9 if color == HEALTHY else 0.8, f"{run_name}: no number logged", color=color,
                            transform=ax.transAxes, ha="center", fontsize=7)
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


def matrix_heatmap(matrix: dict[str, dict], path: str | Path) -> Path:
    """Heatmap of the invariant checks: rows = faults, columns = checks, red = FAIL, amber = by
    design, grey = n/a, values in cells.
    `matrix` is {row: {check: {"value", "passed"}}} (the `check --matrix --json` shape)."""
    rows = list(matrix)
    checks = list(next(iter(matrix.values())))
    fig, ax = plt.subplots(figsize=(1.25 * len(checks) + 2.2, 0.55 * len(rows) + 2.2))
    for i, row in enumerate(rows):
        for j, check in enumerate(checks):
            cell = matrix[row][check]
            # n/a and "by design" are neither a pass nor a failure: they get their own colour
            color = "#e0e0e0" if cell.get("na") else "#f6d58e" if cell.get("by_design") else \
                "#f4a6a6" if cell["passed"] is False else "#c9e8c4"
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color=color))
            v = cell["value"]
            text = "n/a" if cell.get("na") else "nan" if isinstance(v, float) and math.isnan(v) else f"{v:.2g}"
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8,
                    fontweight="bold" if cell["passed"] is False else "normal")
    ax.set_xlim(0, len(checks))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(checks))])
    ax.set_xticklabels([f"{j + 1}. {c}" for j, c in enumerate(checks)], rotation=35, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=9)
    ax.set_title("Which invariant catches which fault\nred = FAIL, amber = fails by design, grey = n/a; "
                 "cells show the measured value", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def seed_spread(panels: list[tuple[str, str, list[float], list[float], bool]], path: str | Path,
                labels: tuple[str, str] = ("GOOD", "probe"), cols: int = 3, share_rows: bool = False) -> Path:
    """One panel per (title, metric, GOOD's per-seed scores, the other side's, moved?): each
    seed a dot, each side's mean a bar, so a move beyond GOOD's spread is seen at a glance. Each
    metric has its own y axis; ``share_rows`` shares it along a row that shows one metric (two
    commits side by side)."""
    cols = min(cols, max(1, len(panels)))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False,
                             sharey="row" if share_rows else False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (title, metric, good, other, moved) in zip(axes.flat, panels):
        for x, (values, colour) in enumerate(((good, HEALTHY), (other, FAULTY if moved else HEALTHY))):
            jitter = [x + 0.08 * (i - (len(values) - 1) / 2) / max(1, len(values)) * 4
                      for i in range(len(values))]
            ax.scatter(jitter, values, s=22, color=colour, alpha=0.8, zorder=3)
            ax.hlines(sum(values) / len(values), x - 0.25, x + 0.25, color=colour, lw=2, zorder=2)
        ax.set_xticks([0, 1], labels)
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(f"{title}{': ' if title else ''}{metric}" + ("  (moved)" if moved else ""),
                     fontsize=9, color=FAULTY if moved else "black")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
