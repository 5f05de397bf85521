"""``rlbisect demo``: a TinyAgent history with one faulty commit, bisected."""

from __future__ import annotations

from typing import cast

import typer

from rlbisect.cli.common import bisect_options, distinct, folder_path, json_text, output_path
from rlbisect.errors import Interrupted


def demo_cmd(
    fault: str = typer.Option("sign_flip", "--fault", help="the fault one commit introduces, e.g. mask_shift (an unknown name lists them all)"
                              + " (public_reward needs --predicate short-run)"),
    commits: int = typer.Option(8, "--commits", min=1, help="commits after the initial import"),
    bad_at: int = typer.Option(None, "--bad-at", min=1, help="position of the faulty commit, 1..COMMITS (default 3)"),
    keep: str = typer.Option(None, "--keep", help="build (or reuse) the history here and keep it"),
    json_path: str = typer.Option(None, "--json", help="write the bisect result, plus fault_commit, as JSON"),
    plot: str = typer.Option(None, "--plot", help="write the bisect timeline as a PNG"),
    predicate: str = typer.Option(None, "--predicate", help="bisect predicate (default: invariants)"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="probe J commits at once (k-ary search), e.g. --jobs 2"),
) -> None:
    """Build a simulated TinyAgent history in which one real commit introduces a fault, bisect it
    with the invariants, and show each probe, the culprit with its diff, and what moved.

    Exit 0 when the bisect names the commit that injected the fault.

    Example: rlbisect demo --fault mask_shift --commits 16 --bad-at 11 --keep /tmp/history --json demo.json
    """
    from rlbisect.cli.progress import live_progress
    from rlbisect.tinyagent.demo import DemoOutcome, run_demo
    from rlbisect.tinyagent import prepare_base
    json_out, plot_out = output_path(json_path, "--json"), output_path(plot, "--plot", figure=True)
    distinct({"--json": json_out, "--plot": plot_out})
    kept = folder_path(keep, "--keep")
    prepare_base(lambda line: typer.echo(line, err=True))
    with live_progress() as progress:
        try:
            demo = run_demo(fault, commits, bad_at, kept, predicate,
                            options=bisect_options(jobs=jobs), say=typer.echo, progress=progress)
        except Interrupted as e:
            if e.partial is not None:
                typer.echo(cast(DemoOutcome, e.partial).result.summary())
            raise typer.Exit(e.exit_code) from None
    typer.echo(demo.result.summary())
    if demo.diff:
        typer.echo(f"\nthe culprit's diff:{demo.diff}")
    typer.echo("found the commit that injected the fault" if demo.hit else
               f"MISSED: the fault was injected by {demo.history.fault_commit[:10]}")
    if json_out:
        json_out.write_text(json_text(demo.to_json()) + "\n")
    if plot_out:
        from rlbisect.bisect.timeline import draw
        for extra_plot, what in draw(demo.result, plot_out)[1:]:
            typer.echo(f"wrote {extra_plot} ({what})")
    raise typer.Exit(0 if demo.hit else 1)
