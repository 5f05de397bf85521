"""``rlbisect plot``: the dashboard of runs written by ``rlbisect train --out``."""

from __future__ import annotations

import typer

from rlbisect.cli.common import output_path


def plot_cmd(
    runs: list[str] = typer.Argument(..., metavar="RUN.jsonl...", help="runs written by `rlbisect train --out`; the first is the healthy reference"),
    out: str = typer.Option("dashboard.png", "--out", help="PNG to write"),
    metrics: str = typer.Option(None, "--metrics", help="comma-separated metrics under the reward panel"),
) -> None:
    """Draw the dashboard: per run, the training reward on top and the exposing metrics below, the
    healthy (first) run drawn beside each other run.

    Example: rlbisect plot healthy.jsonl mask_shift.jsonl --metrics logp_gap,grad_norm --out dash.png
    """
    from rlbisect.plots import dashboard, load_runs, panels
    png, chosen = output_path(out, "--out", figure=True), panels(metrics)
    loaded = load_runs(runs)
    for name, rows in loaded.items():   # null or a string where the reward goes: nothing to draw
        if not any("reward" in r for r in rows):
            typer.echo(f"rlbisect plot: {name}: no reward is a number (null or text): its reward is not drawn", err=True)
    typer.echo(f"wrote {dashboard(loaded, png, chosen)}")
