"""``rlbisect compare``: runs a user already has, judged against GOOD's seed spread."""

from __future__ import annotations

from typing import cast

import typer

from rlbisect.cli.common import distinct, json_text, output_path
from rlbisect.errors import InputError


def compare_cmd(
    runs: list[str] = typer.Argument(..., metavar="GOOD_RUN... --vs RUN...",
                                     help="GOOD's runs (one metrics file per seed: JSONL, CSV or a TensorBoard folder), then --vs and the runs to judge"),
    metric: str = typer.Option(None, "--metric", help="judge this one metric instead of the dashboard"),
    metrics: str = typer.Option(None, "--metrics", help="judge only these metrics, comma-separated"),
    direction: str = typer.Option(None, "--direction", help="with --metric: lower (default), higher or change"),
    window: int = typer.Option(4, "--window", min=1, help="a run's score: the mean of its last WINDOW rows"),
    metric_map: list[str] = typer.Option(None, "--metric-map", help="THEIRS=OURS renames (repeatable; or a JSON file)"),
    alpha: float = typer.Option(0.05, "--alpha", min=1e-6, max=0.5, help="false-alarm rate over all metrics"),
    json_path: str = typer.Option(None, "--json", help="write the judgement as JSON to this file"),
    plot: str = typer.Option(None, "--plot", help="PNG: each side's per-run scores for the metrics that moved"),
    paired: bool = typer.Option(False, "--paired", help="the n-th run of each side ran the same seed: also read each metric seed by seed"),
) -> None:
    """Judge runs you already have against GOOD's seed spread, as the short-run predicate does:
    every metric both sides log (or --metric), the false-alarm rate held at --alpha over all of
    them. Exit 0 nothing moved, 1 a metric moved (the table marks it), 3 the spread cannot tell.

    Example: rlbisect compare main_s0.jsonl main_s1.jsonl main_s2.jsonl --vs pr_s0.jsonl pr_s1.jsonl pr_s2.jsonl

    Example: rlbisect compare a/*.csv --vs b/*.csv --metric-map train/reward=reward --plot moved.png
    """
    from rlbisect.runs.compare import compare, evidence_plot, split_runs
    from rlbisect.runs.read import parse_metric_map
    from rlbisect.runs.stats import Direction
    good, other = split_runs(runs)
    outputs = distinct({flag: output_path(p, flag, figure=flag == "--plot") for flag, p in
                        (("--json", json_path), ("--plot", plot))}, inputs=[*good, *other])
    if direction not in (None, "lower", "higher", "change"):
        raise InputError(f"--direction {direction}: choose lower, higher or change")
    result = compare(good, other, metric=metric, direction=cast("Direction | None", direction), window=window,
                     metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
                     metric_map=parse_metric_map(metric_map or []), alpha=alpha, paired=paired)
    typer.echo(result.table())
    typer.echo(result.verdict_line())
    if outputs["--json"]:
        outputs["--json"].write_text(json_text(result.to_json()) + "\n")
    if outputs["--plot"]:
        typer.echo(f"wrote {evidence_plot(result, outputs['--plot'])}")
    raise typer.Exit(result.exit_code)
