"""The command line: parse, call the library, print. Each command's docstring is its help, with an example."""

from __future__ import annotations

import typer

from reference_trainer.faults import BUGS

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Regression hunting for RL training code: invariants, bisect, replayable steps.")
_BUGS = tuple(BUGS)   # the embedded trainer's fault switches (faults.py imports nothing heavy)


@app.command("train")
def train_cmd(
    steps: int = typer.Option(24, "--steps", min=1, help="RL steps (64 episodes each)"),
    seed: int = typer.Option(0, "--seed", help="seed of the training stream"),
    eval_every: int = typer.Option(8, "--eval-every", min=1, help="held-out evaluation every N steps (and at the last)"),
    out: str = typer.Option(None, "--out", help="write one JSON row per step to this file"),
    bug: str = typer.Option(None, "--bug", help="inject a code fault: " + ", ".join(_BUGS)),
    reward: str = typer.Option("hidden", "--reward", help="hidden (honest) or public (gameable) verifier"),
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
    from rlbisect.reference import train_main
    raise typer.Exit(train_main(steps=steps, seed=seed, eval_every=eval_every, out=out, bug=bug, reward=reward,
                                lr=lr, kl_coef=kl_coef, max_turns=max_turns, loss_mode=loss_mode,
                                temperature=temperature, snapshot_dir=snapshot_dir, snapshot_every=snapshot_every))


@app.command("demo")
def demo_cmd(
    fault: str = typer.Option("sign_flip", "--fault", help="the fault one commit introduces: " + ", ".join(_BUGS)),
    commits: int = typer.Option(8, "--commits", min=1, help="commits after the initial import"),
    bad_at: int = typer.Option(None, "--bad-at", min=1, help="position of the faulty commit, 1..COMMITS (default 3)"),
    keep: str = typer.Option(None, "--keep", help="build (or reuse) the history here and keep it"),
    json_path: str = typer.Option(None, "--json", help="write the bisect result, plus fault_commit, as JSON"),
    plot: str = typer.Option(None, "--plot", help="write the bisect timeline as a PNG"),
    predicate: str = typer.Option(None, "--predicate", help="bisect predicate (default: invariants)"),
) -> None:
    """Build a simulated TinyAgent history in which one real commit introduces a fault, bisect it
    with the invariants, and show each probe, the culprit with its diff, and what moved.

    Exit 0 when the bisect names the commit that injected the fault.

    Example: rlbisect demo --fault mask_shift --commits 16 --bad-at 11 --keep /tmp/history --json demo.json
    """
    from pathlib import Path

    from rlbisect.bisect import PredicateError
    from rlbisect.demo import run_demo
    try:
        code = run_demo(fault, commits, bad_at, Path(keep) if keep else None, Path(json_path) if json_path else None,
                        Path(plot) if plot else None, predicate)
    except (ValueError, PredicateError) as e:
        _fail(str(e))
    raise typer.Exit(code)


@app.command("check")
def check_cmd(
    adapter: str = typer.Option(None, "--adapter", help="MODULE:FACTORY or FILE.py:FACTORY (default: the reference trainer)"),
    bug: str = typer.Option(None, "--bug", help="inject a code fault (adapters that accept `bug`)"),
    episodes: int = typer.Option(64, "--episodes", min=1, help="episodes in the probe batch"),
    seed: int = typer.Option(1, "--seed", help="seed of the probe batch"),
    kl_coef: float = typer.Option(0.1, "--kl-coef", min=0, help="KL weight, so the reference check applies (0: none)"),
    as_json: bool = typer.Option(False, "--json", help='print {check: {"value", "passed"}}'),
    matrix: bool = typer.Option(False, "--matrix", help="run with no fault and with each of the seven code faults"),
    plot: str = typer.Option(None, "--plot", help="with --matrix: draw the matrix as a PNG heatmap"),
) -> None:
    """Run the nine step-0 invariants on one probe batch through the trainer's own code.

    Exit 0 when every check passes, 1 when any fails, 2 when the checks could not run.

    Example: rlbisect check --bug sign_flip          (or: --adapter my_trainer/rl_adapter.py:make_adapter)
    """
    import json

    from rlbisect.adapter import DEFAULT_ADAPTER, AdapterError, load_adapter
    from rlbisect.invariants import as_json as to_json, check_matrix, sanity_checks
    if plot and not matrix:
        _fail("--plot draws the matrix: add --matrix")
    spec = adapter or DEFAULT_ADAPTER

    def make(fault):
        return load_adapter(spec, episodes=episodes, seed=seed, kl_coef=kl_coef, bug=fault)
    try:
        if matrix:
            results = check_matrix(make, [None, *_BUGS], on_row=None if as_json else _print_matrix_row)
            table = {row: to_json(r) for row, r in results.items()}
            if plot:
                from rlbisect.plots import check_matrix as draw
                draw(table, plot)
            typer.echo(json.dumps(table, indent=2)) if as_json else None
            raise typer.Exit(0 if all(c["passed"] for c in table["none"].values()) else 1)
        results = sanity_checks(make(bug))
    except (AdapterError, ValueError) as e:
        _fail(str(e))
    if as_json:
        typer.echo(json.dumps(to_json(results), indent=2))
    else:
        for r in results.values():
            typer.echo(f"{r.name:<34} {r.value:10.3g}  {'ok' if r.passed else 'FAIL'}")
        failed = [r.name for r in results.values() if not r.passed]
        typer.echo(f"FAILED: {'; '.join(failed)}" if failed else "all checks passed")
    raise typer.Exit(0 if all(r.passed for r in results.values()) else 1)


def _print_matrix_row(fault, results) -> None:
    cells = " ".join(f"{'ok' if r.passed else 'FAIL':>4}" for r in results.values())
    typer.echo(f"{fault or 'none':<15} {cells}")


def _fail(msg: str) -> None:
    typer.echo(f"rlbisect: error: {msg}", err=True)
    raise typer.Exit(2)


@app.command("plot")
def plot_cmd(
    runs: list[str] = typer.Argument(..., metavar="RUN.jsonl...", help="runs written by `rlbisect train --out`; the first is the healthy reference"),
    out: str = typer.Option("dashboard.png", "--out", help="PNG to write"),
    metrics: str = typer.Option(None, "--metrics", help="comma-separated metrics under the reward panel"),
) -> None:
    """Draw the dashboard: per run, the training reward on top and the exposing metrics below, the
    healthy (first) run drawn beside each other run.

    Example: rlbisect plot healthy.jsonl mask_shift.jsonl --metrics logp_gap,grad_norm --out dash.png
    """
    import json
    from pathlib import Path

    from rlbisect.metrics import DEFAULT_PANELS
    from rlbisect.plots import dashboard
    loaded = {}
    for path in runs:
        try:
            loaded[Path(path).stem] = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as e:
            _fail(f"{path}: {e}".splitlines()[0])
        if not loaded[Path(path).stem] or "reward" not in loaded[Path(path).stem][0]:
            _fail(f"{path}: not a run written by `rlbisect train --out` (no reward column)")
    chosen = tuple(m.strip() for m in metrics.split(",")) if metrics else DEFAULT_PANELS
    typer.echo(f"wrote {dashboard(loaded, out, chosen)}")


@app.command("inspect")
def inspect_cmd(path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
                as_json: bool = typer.Option(False, "--json", help="print JSON instead of text")) -> None:
    """Print a snapshot's metadata: step, code identity, torch, config, stats, tensors, and which
    detector fired and why. Exit 2 with a one-line error for a file that is not a valid snapshot.

    Example: rlbisect inspect snapshots/step-000003.pt --json
    """
    import json

    from rlbisect.replay import describe, render_text
    from rlbisect.snapshot import SnapshotError, load_snapshot
    try:
        info = describe(load_snapshot(path))
    except SnapshotError as e:
        _fail(str(e))
    typer.echo(json.dumps(info, indent=2) if as_json else render_text(info))


@app.command("replay")
def replay_cmd(
    path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
    bug: str = typer.Option(None, "--bug", help="replay with this code fault instead of the recorded one ('none': no fault)"),
    at: str = typer.Option(None, "--at", help="replay on this commit's trainer code (in a temporary worktree)"),
    repo: str = typer.Option(".", "--repo", help="the git repository --at refers to"),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0, help="allowed |diff| per statistic: X * (1 + |recorded|); 0 = bit-exact"),
    timeout: float = typer.Option(None, "--timeout", help="seconds allowed for a replay with --at"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
) -> None:
    """Re-run the update saved in a snapshot; print recorded vs replayed for every statistic the
    update produces (moved ones first, biggest first) and the post-update parameter difference.

    Exit 0 identical, 1 something moved or the update raised, 2 cannot replay (invalid file,
    unknown trainer, bad --at).

    Example: rlbisect replay snapshots/step-000005.pt --at HEAD~3 --repo .
    """
    from rlbisect.replay_at import replay_command
    raise typer.Exit(replay_command(path, bug=bug, at=at, repo=repo, tolerance=tolerance, timeout=timeout,
                                    as_json=as_json))


@app.command("promote")
def promote_cmd(
    path: str = typer.Argument(..., help="a step-NNNNNN.pt snapshot file"),
    to: str = typer.Option(..., "--to", help="your test folder: gets test_replay_step_NNNNNN.py and snapshots/"),
    report: str = typer.Option(None, "--report", help="a bisect JSON (rlbisect run --json): also assert the invariants that caught it"),
    invariant: list[str] = typer.Option(None, "--invariant", help="assert this invariant instead of the report's (repeatable)"),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0, help="allowed |diff| per statistic in the test; 0 = bit-exact"),
    force: bool = typer.Option(False, "--force", help="overwrite existing files"),
) -> None:
    """Write a pytest file (plus the snapshot it needs) that replays the step and asserts its recorded
    update statistics; with --report, also the invariants that caught the regression.

    Exit 0 written, 1 the step does not replay on the current code, 2 bad input or a file in the way.

    Example: rlbisect promote snapshots/step-000005.pt --to tests/regressions --report bisect.json
    """
    from rlbisect.promote import NotReplayable, PromoteError, promote
    from rlbisect.snapshot import SnapshotError
    try:
        done = promote(path, to, report, force=force, tolerance=tolerance, invariants=invariant or None)
    except (SnapshotError, PromoteError) as e:
        _fail(str(e))
    except NotReplayable as e:
        typer.echo(f"rlbisect: {e}", err=True)
        raise typer.Exit(1)
    for line in [*done.notes, f"wrote {done.test}", f"wrote {done.snapshot}"]:
        typer.echo(line)


@app.command("run")
def run_cmd(
    range_spec: str = typer.Argument(..., metavar="GOOD..BAD", help="known-good and known-bad revisions"),
    command: list[str] = typer.Argument(None, metavar="[-- CMD ARGS...]",
                                        help="predicate command, run in each probe's worktree"),
    repo: str = typer.Option(".", "--repo", help="the git repository (default: current directory)"),
    predicate: str = typer.Option(None, "--predicate", help="predicate NAME[:ARG] (default: the command after --)"),
    adapter: str = typer.Option(None, "--adapter", help="trainer adapter module:factory, for predicates that use one"),
    metric: str = typer.Option(None, "--metric", help="short-run: the logged metric to compare, or eval_pass (default reward)"),
    steps: int = typer.Option(None, "--steps", help="short-run: training steps per run (default 8)"),
    seeds: int = typer.Option(None, "--seeds", help="short-run: matched seeds at the first look (default 3)"),
    max_seeds: int = typer.Option(None, "--max-seeds", help="short-run: seeds at most, before 'unknown' (default 9)"),
    direction: str = typer.Option(None, "--direction", help="short-run: which change is a regression: lower|higher|change"),
    runner: str = typer.Option(None, "--runner", help="short-run: MODULE:FN with fn(steps, seed) -> metric rows"),
    first_parent: bool = typer.Option(False, "--first-parent", help="follow only first parents of merges (git bisect --first-parent)"),
    timeout: float = typer.Option(None, "--timeout", help="seconds per probe; a probe that runs longer is skipped, never bad"),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="probe J commits at once, each in its own worktree: k-ary "
                             "search in about log_(J+1) N rounds, same answer as one at a time (e.g. --jobs 4)"),
    executor: str = typer.Option("local", "--executor", help="where probes run: local (this machine) or ray (one Ray "
                                 "task per probe; pip install 'rlbisect[ray]'), e.g. --executor ray --jobs 8"),
    ray_address: str = typer.Option(None, "--ray-address", help="--executor ray: cluster to connect to (default: "
                                    "RAY_ADDRESS, else a local instance), e.g. --ray-address auto or 10.0.0.5:6379"),
    ray_gpus: float = typer.Option(0.0, "--ray-gpus", help="--executor ray: GPUs each probe task asks for, "
                                   "e.g. --ray-gpus 1"),
    clone_url: str = typer.Option(None, "--clone-url", help="--executor ray: nodes clone this URL (the commits must "
                                  "be pushed there) instead of reading --repo over a shared filesystem, "
                                  "e.g. --clone-url https://git.example.com/team/trainer.git"),
    json_path: str = typer.Option(None, "--json", help="write the result as JSON to this file"),
    report_path: str = typer.Option(None, "--report", help="write a markdown report to this file"),
    plot_path: str = typer.Option(None, "--plot", help="write a PNG timeline of the probes to this file"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write .git/rlbisect/cache.jsonl"),
    flaky: bool = typer.Option(False, "--flaky", help="the predicate can give a wrong verdict: keep a posterior over the "
                               "culprit (unknown flip rate), repeat probes where most informative, stop at --confidence; "
                               "bisects the first-parent chain; a repeat is always a fresh run (runs are recorded apart "
                               "from deterministic results, and a later --flaky bisect starts from them)"),
    confidence: float = typer.Option(0.95, "--confidence", help="--flaky: stop when the top culprit's posterior reaches this "
                                     "(0.5 < C < 1); otherwise exit 3 with the likeliest commits"),
    max_runs: int = typer.Option(None, "--max-runs", help="--flaky: predicate runs at most (default 12 * ceil(log2(N+1)), "
                                 "at least 20)"),
) -> None:
    """Find the first bad commit in GOOD..BAD with a real git bisect. Probes run in temporary
    worktrees: your working tree, index, HEAD, branch and refs are never touched.

    With -- CMD the command decides, as in git bisect run: exit 0 good, 125 skip, 1-127 bad, 128+ aborts.

    Exit 0 found, 3 only skipped commits left (all listed), 2 bad input, 4 predicate aborted, 130/143 interrupted.
    With --flaky, exit 3 also means "not sure within --max-runs" (the likeliest commits are listed).

    Results are cached by tree in .git/rlbisect/ (the one place rlbisect writes in your repository).

    Predicates: invariants (default: the nine step-0 checks on each commit's trainer code),
    short-run (matched-seed training runs against GOOD, judged on the seed spread), or a command.

    Example: rlbisect run v1.2..main --timeout 600 --json bisect.json -- pytest -x tests/test_loss.py

    Example: rlbisect run v1.2..main --predicate short-run --metric eval_pass --steps 8 --seeds 3

    Example: rlbisect run v1.2..main --flaky --confidence 0.95 -- pytest -x tests/test_flaky_loss.py

    Example: rlbisect run v1.2..main --jobs 4 --executor ray --ray-address auto --ray-gpus 1 --predicate short-run
    """
    from pathlib import Path

    from rlbisect.bisect.report import run_and_report
    code = run_and_report(range_spec, list(command or []), repo=Path(repo), predicate=predicate,
                          first_parent=first_parent, timeout=timeout, use_cache=not no_cache,
                          jobs=jobs, executor=executor, ray_address=ray_address, ray_gpus=ray_gpus, clone_url=clone_url,
                          json_path=Path(json_path) if json_path else None,
                          report_path=Path(report_path) if report_path else None,
                          plot_path=Path(plot_path) if plot_path else None,
                          flaky=flaky, confidence=confidence, max_runs=max_runs,
                          options={k: str(v) for k, v in dict(adapter=adapter, metric=metric, steps=steps, seeds=seeds,
                                   max_seeds=max_seeds, direction=direction, runner=runner).items() if v is not None})
    raise typer.Exit(code)


def main() -> None:
    """Console entry point: usage errors become one line on stderr and exit 2 (no usage box)."""
    import sys

    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        # typer vendors its own click; its usage errors all carry format_message()
        if type(e).__name__ not in ("UsageError", "BadParameter", "NoSuchOption", "MissingParameter",
                                    "BadOptionUsage", "BadArgumentUsage", "NoArgsIsHelpError"):
            raise
        if e.format_message():   # NoArgsIsHelpError has already printed the help
            typer.echo(f"rlbisect: error: {e.format_message()}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
