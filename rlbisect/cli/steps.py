"""``rlbisect inspect``, ``replay`` and ``promote``: what to do with a saved step."""

from __future__ import annotations

import typer

from rlbisect.cli.common import finite, given_adapter, json_text


def inspect_cmd(path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
                as_json: bool = typer.Option(False, "--json", help="print JSON instead of text")) -> None:
    """Print a snapshot's metadata: step, code identity, torch, config, stats, tensors, and which
    detector fired and why. Exit 2 with a one-line error for a file that is not a valid snapshot.

    Example: rlbisect inspect snapshots/step-000003.pt --json
    """
    from rlbisect.steps.describe import describe, render_text
    from rlbisect.steps.format import load_snapshot
    info = describe(load_snapshot(path))
    typer.echo(json_text(info) if as_json else render_text(info))


def replay_cmd(
    path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
    bug: str = typer.Option(None, "--bug", help="replay with this code fault instead of the recorded one ('none': no fault)"),
    at: str = typer.Option(None, "--at", help="replay with this commit's trainer code (checked out privately)"),
    repo: str = typer.Option(None, "--repo", help="the git repository --at refers to (default: the one GIT_DIR names, else the current folder's)"),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0, help="allowed |diff| per statistic: X * (1 + |recorded|); 0 = bit-exact"),
    timeout: float = typer.Option(None, "--timeout", min=0.001, help="seconds allowed for a replay with --at"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
    adapter: str = typer.Option(None, "--adapter", help="replay with this adapter's replay() (MODULE:FACTORY or "
                                "FILE.py:FACTORY): snapshots of trainers other than TinyAgent"),
    adapter_opt: list[str] = typer.Option(None, "--adapter-opt", help="KEY=VALUE for the adapter's factory, repeatable"),
) -> None:
    """Re-run the update saved in a snapshot; print recorded vs replayed for every statistic the
    update produces (moved ones first, biggest first) and the post-update parameter difference.

    Exit 0 identical (a step saved because it raised: raises the same error again), 1 something
    moved or the update raised, 2 cannot replay (invalid file, unknown trainer, bad --at).

    Example: rlbisect replay snapshots/step-000005.pt --at HEAD~3 --repo .
    """
    from rlbisect.steps.at import replay
    from rlbisect.steps.replay import render_report, report_json
    from rlbisect.steps.at import adapter_replayer
    finite(tolerance=tolerance)   # an infinite one passes every difference
    replayer = adapter_replayer(adapter, adapter_opt, bug) if given_adapter(adapter) else None
    report = replay(path, bug=bug, at=at, repo=repo, tolerance=tolerance, timeout=timeout, replayer=replayer)
    typer.echo(json_text(report_json(report)) if as_json else render_report(report))
    raise typer.Exit(report.exit_code)


def promote_cmd(
    path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
    to: str = typer.Option(..., "--to", help="your test folder: gets test_replay_step_NNNNNN.py and snapshots/"),
    report: str = typer.Option(None, "--report", help="a bisect JSON (rlbisect run --json): also assert the invariants that caught it"),
    invariant: list[str] = typer.Option(None, "--invariant", help="assert this invariant instead of the report's (repeatable)"),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0, help="allowed |diff| per statistic in the test; 0 = bit-exact"),
    force: bool = typer.Option(False, "--force", help="overwrite existing files"),
    adapter: str = typer.Option(None, "--adapter", help="the adapter whose replay() the test uses (non-TinyAgent snapshots)"),
    adapter_opt: list[str] = typer.Option(None, "--adapter-opt", help="KEY=VALUE for the adapter's factory, repeatable"),
) -> None:
    """Write a pytest file (plus the snapshot it needs) that replays the step and asserts its recorded
    update statistics; with --report, also the invariants that caught the regression.

    Exit 0 written, 1 the step (or an invariant it asserts) fails on the current code, 2 bad input
    or a file in the way, 125 the adapter cannot be loaded or has no replay().

    Example: rlbisect promote snapshots/step-000005.pt --to tests/regressions --report bisect.json
    """
    from rlbisect.steps.promote import promote
    from rlbisect.check.adapter import parse_adapter_opts
    finite(tolerance=tolerance)
    done = promote(path, to, report, force=force, tolerance=tolerance, invariants=invariant or None,
                   adapter=given_adapter(adapter), adapter_opts=parse_adapter_opts(adapter_opt))
    for line in [*done.notes, f"wrote {done.test}", *([f"wrote {done.data}"] if done.data else []), f"wrote {done.snapshot}"]:
        typer.echo(line)
