"""The command line: parse, call one library function, print.

Each command's docstring is its help, with an example; option help comes from the documented
config models where one exists."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Callable

import typer

from rlbisect.cli_check import check_cmd
from rlbisect.cli_compare import compare_cmd
from rlbisect.cli_run import bisect_options, output_path, run_cmd
from rlbisect.errors import Interrupted, RlbisectError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,   # help is plain text: [ray] and [-- CMD] must survive
                  help="Regression hunting for RL training code: invariants, bisect, replayable steps.")


def _faults() -> str:
    from rlbisect.tinyagent import fault_names
    return ", ".join(fault_names())


def _demo_faults() -> str:
    from rlbisect.demo import fault_names
    return ", ".join(fault_names())


def command(name: str, **settings) -> Callable:
    """Register a command whose :class:`RlbisectError` becomes one line and its exit code."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except RlbisectError as e:
                typer.echo(f"rlbisect {name}: {e}", err=True)
                raise typer.Exit(e.exit_code) from None
        return app.command(name, **settings)(run)
    return wrap


@command("train")
def train_cmd(
    steps: int = typer.Option(24, "--steps", min=1, help="RL steps (64 episodes each)"),
    seed: int = typer.Option(0, "--seed", help="seed of the training stream"),
    eval_every: int = typer.Option(8, "--eval-every", min=1, help="held-out evaluation every N steps (and at the last)"),
    out: str = typer.Option(None, "--out", help="write one JSON row per step to this file"),
    bug: str = typer.Option(None, "--bug", help="inject a code fault: " + _faults()),
    reward: str = typer.Option(None, "--reward",
                               help="hidden (honest) or public (gameable) verifier (default: the trainer's, hidden)"),
    lr: float = typer.Option(None, "--lr", help="Adam learning rate (default 1e-3)"),
    kl_coef: float = typer.Option(None, "--kl-coef", help="KL-to-reference weight (default 0: no reference)"),
    max_turns: int = typer.Option(None, "--max-turns", help="policy calls per episode (default 6)"),
    loss_mode: str = typer.Option(None, "--loss-mode", help="token_mean or seq_mean_token_mean"),
    temperature: float = typer.Option(None, "--temperature", help="sampler and trainer temperature (default 1)"),
    snapshot_dir: str = typer.Option(None, "--snapshot-dir", help="save replayable steps here when a detector fires"),
    snapshot_every: int = typer.Option(None, "--snapshot-every", min=1, help="also save every K steps"),
) -> None:
    """Train TinyAgent from its behaviour-cloned starting policy and log one metric row per step.

    Example: rlbisect train --steps 24 --seed 0 --eval-every 8 --out run.jsonl --bug mask_shift
    """
    from rlbisect.tinyagent import TrainSettings, first_use_note, step_line, train
    if note := first_use_note():
        typer.echo(note, err=True)
    settings = TrainSettings(steps, seed, eval_every, bug, reward, lr, kl_coef, max_turns, loss_mode,
                             temperature, output_path(out, "--out"),
                             Path(snapshot_dir) if snapshot_dir else None, snapshot_every)
    def hit_line(hit) -> None:
        where = "saved" if snapshot_dir else "not saved: add --snapshot-dir DIR to keep it replayable"
        typer.echo(f"  detector {hit.detector} fired at step {hit.step}: {hit.message}; {where}")
    done = train(settings, on_row=lambda row: typer.echo(step_line(row)), on_hit=hit_line)
    if snapshot_dir is not None:
        typer.echo(f"{len(done.snapshots)} snapshot(s) in {snapshot_dir}")


@command("demo")
def demo_cmd(
    fault: str = typer.Option("sign_flip", "--fault", help="the fault one commit introduces: " + _demo_faults()
                              + " (entropy_sign and public_reward need --predicate short-run)"),
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
    from rlbisect.console import live_progress
    from rlbisect.demo import run_demo
    from rlbisect.tinyagent import prepare_base
    json_out, plot_out = output_path(json_path, "--json"), output_path(plot, "--plot")
    prepare_base(lambda line: typer.echo(line, err=True))
    with live_progress() as progress:
        try:
            demo = run_demo(fault, commits, bad_at, Path(keep) if keep else None, predicate,
                            options=bisect_options(jobs=jobs), say=typer.echo, progress=progress)
        except Interrupted as e:
            if e.partial is not None:
                typer.echo(e.partial.result.summary())
            raise typer.Exit(e.exit_code) from None
    typer.echo(demo.result.summary())
    if demo.diff:
        typer.echo(f"\nthe culprit's diff:{demo.diff}")
    typer.echo("found the commit that injected the fault" if demo.hit else
               f"MISSED: the fault was injected by {demo.history.fault_commit[:10]}")
    if json_out:
        json_out.write_text(json.dumps(demo.to_json(), indent=2) + "\n")
    if plot_out:
        from rlbisect.plots import bisect_timeline
        bisect_timeline(demo.result, plot_out)
    raise typer.Exit(0 if demo.hit else 1)


@command("plot")
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
    png, chosen = output_path(out, "--out"), panels(metrics)
    typer.echo(f"wrote {dashboard(load_runs(runs), png, chosen)}")


@command("inspect")
def inspect_cmd(path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
                as_json: bool = typer.Option(False, "--json", help="print JSON instead of text")) -> None:
    """Print a snapshot's metadata: step, code identity, torch, config, stats, tensors, and which
    detector fired and why. Exit 2 with a one-line error for a file that is not a valid snapshot.

    Example: rlbisect inspect snapshots/step-000003.pt --json
    """
    from rlbisect.steps.describe import describe, render_text
    from rlbisect.steps.format import load_snapshot
    info = describe(load_snapshot(path))
    typer.echo(json.dumps(info, indent=2) if as_json else render_text(info))


@command("replay")
def replay_cmd(
    path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
    bug: str = typer.Option(None, "--bug", help="replay with this code fault instead of the recorded one ('none': no fault)"),
    at: str = typer.Option(None, "--at", help="replay with this commit's trainer code (checked out privately)"),
    repo: str = typer.Option(".", "--repo", help="the git repository --at refers to"),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0, help="allowed |diff| per statistic: X * (1 + |recorded|); 0 = bit-exact"),
    timeout: float = typer.Option(None, "--timeout", min=0.001, help="seconds allowed for a replay with --at"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
    adapter: str = typer.Option(None, "--adapter", help="replay with this adapter's replay() (MODULE:FACTORY or "
                                "FILE.py:FACTORY): snapshots of trainers other than TinyAgent"),
    adapter_opt: list[str] = typer.Option(None, "--adapter-opt", help="KEY=VALUE for the adapter's factory, repeatable"),
) -> None:
    """Re-run the update saved in a snapshot; print recorded vs replayed for every statistic the
    update produces (moved ones first, biggest first) and the post-update parameter difference.

    Exit 0 identical, 1 something moved or the update raised, 2 cannot replay (invalid file,
    unknown trainer, bad --at).

    Example: rlbisect replay snapshots/step-000005.pt --at HEAD~3 --repo .
    """
    from rlbisect.steps.at import replay
    from rlbisect.steps.replay import render_report, report_json
    from rlbisect.steps.at import adapter_replayer
    replayer = adapter_replayer(adapter, adapter_opt, bug) if adapter else None
    report = replay(path, bug=bug, at=at, repo=repo, tolerance=tolerance, timeout=timeout, replayer=replayer)
    typer.echo(json.dumps(report_json(report), indent=2) if as_json else render_report(report))
    raise typer.Exit(report.exit_code)


@command("promote")
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

    Exit 0 written, 1 the step does not replay on the current code, 2 bad input or a file in the way.

    Example: rlbisect promote snapshots/step-000005.pt --to tests/regressions --report bisect.json
    """
    from rlbisect.steps.promote import promote
    from rlbisect.check.adapter import parse_adapter_opts
    done = promote(path, to, report, force=force, tolerance=tolerance, invariants=invariant or None,
                   adapter=adapter, adapter_opts=parse_adapter_opts(adapter_opt))
    for line in [*done.notes, f"wrote {done.test}", f"wrote {done.snapshot}"]:
        typer.echo(line)


@command("warm")
def warm_cmd(
    action: str = typer.Argument(..., help="start, stop or status"),
    idle: float = typer.Option(30.0, "--idle", min=0.1, help="with start: minutes without a check before it exits"),
) -> None:
    """Keep torch imported in a server this user's `rlbisect check` hands its work to: a check then
    costs its own work (about 0.4 s on TinyAgent) instead of 1.5-2 s, with the same output byte for
    byte. Only a caller with the same interpreter, sys.path and environment is served; anything else
    runs cold with a note. RLBISECT_COLD=1 never uses it.

    Exit 0 done (status: a server is up), 1 status: none is up, 2 it could not start.

    Example: rlbisect warm start --idle 60 && rlbisect check && rlbisect warm stop
    """
    from rlbisect.errors import InputError
    from rlbisect.launch import WarmError, start, status, stop
    if action not in ("start", "stop", "status"):
        raise InputError(f"unknown action {action!r}: start, stop or status")
    try:
        if action == "start":
            up = start(idle)
            typer.echo(f"warm server up (pid {up['pid']}, {up['socket']}); it exits after {idle:g} min "
                       "without a check")
        elif action == "stop":
            typer.echo("warm server stopped" if stop() else "no warm server was running")
        elif (up := status()) is None:
            typer.echo("no warm server is running")
            raise typer.Exit(1)
        else:
            typer.echo(f"warm server up (pid {up['pid']}, {up['socket']}): checks served {up['served']}, "
                       f"running {up['running']}; exits after {up['idle_minutes']:g} min idle")
    except WarmError as e:
        raise InputError(str(e)) from None


command("run")(run_cmd)
command("check")(check_cmd)
# "--vs" splits the runs: it must reach the command as an argument, not as an unknown option
command("compare", context_settings={"ignore_unknown_options": True})(compare_cmd)


def main() -> None:
    """Console entry point: usage errors become one line on stderr and exit 2 (no usage box)."""
    from rlbisect.startup import exit_now
    try:
        _main()
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        exit_now(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))


def _main() -> None:
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        # typer vendors its own click; its usage errors all carry format_message()
        if not hasattr(e, "format_message") or not hasattr(e, "exit_code"):
            raise
        if e.format_message():   # NoArgsIsHelpError has already printed the help
            name = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
            hint = " (the predicate's own options go after --: rlbisect run GOOD..BAD -- CMD ARGS)" \
                if name == "run" and type(e).__name__ == "NoSuchOption" and "--" not in sys.argv else ""
            typer.echo(f"rlbisect {name}: {e.format_message()}{hint}".replace("rlbisect : ", "rlbisect: "),
                       err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
