"""``rlbisect run``: the bisect command (its many options come from the documented models).

Option help comes from the models that define the options: :class:`BisectOptions` for the search
and each predicate's options model.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import cast

import typer

from rlbisect.bisect.options import BisectOptions as B
from rlbisect.bisect.predicates.invariants import InvariantsOptions as I
from rlbisect.bisect.predicates.short_run import ShortRunOptions as S
from rlbisect.cli.common import (bisect_options, distinct, doc, finite, given_adapter, json_text, output_path,
                                 probe_seed_list)
from rlbisect.errors import InputError, Interrupted
from rlbisect.runs.read import parse_metric_map


def _adapter_opts(given: list[str] | None) -> dict | None:
    from rlbisect.check.adapter import parse_adapter_opts      # imports torch: only when asked
    # the invariants predicate sets these itself: given here too, every probe raised a TypeError
    return parse_adapter_opts(given, {"seed": "--probe-seeds", "episodes": "the invariants predicate (64)",
                                      "kl_coef": "the invariants predicate (0.1)"}) if given else None


def _checks(given: list[str] | None) -> list[str] | None:
    from rlbisect.bisect.predicates.invariants import select_checks   # imports torch: only when asked
    return select_checks(given) if given else None


def run_cmd(
    range_spec: str = typer.Argument(..., metavar="GOOD..BAD", help="known-good and known-bad revisions"),
    command_: list[str] = typer.Argument(None, metavar="[-- CMD ARGS...]",
                                         help="predicate command, run in each probe's private checkout"),
    repo: str = typer.Option(None, "--repo", help="the git repository (default: the one GIT_DIR names, else the current folder's)"),
    predicate: str = typer.Option(None, "--predicate", help="predicate NAME[:ARG] (default: the command after --, else invariants)"),
    adapter: str = typer.Option(None, "--adapter", help="invariants: " + doc(I, "adapter")),
    probe_seeds: str = typer.Option(None, "--probe-seeds", help="invariants: " + doc(I, "probe_seeds")),
    adapter_opt: list[str] = typer.Option(None, "--adapter-opt", help="invariants: " + doc(I, "adapter_opts")),
    runs: bool = typer.Option(None, "--runs/--no-runs", help="invariants: " + doc(I, "runs")),
    checks: list[str] = typer.Option(None, "--checks", metavar="N,NAME,...", help="invariants: " + doc(I, "checks")),
    metric: str = typer.Option(None, "--metric", help="short-run: " + doc(S, "metric")),
    metrics: str = typer.Option(None, "--metrics", help="short-run: " + doc(S, "metrics")),
    metrics_file: str = typer.Option(None, "--metrics-file", help="short-run: " + doc(S, "metrics_file")),
    metric_map: list[str] = typer.Option(None, "--metric-map", help="short-run: " + doc(S, "metric_map")
                                         + " (repeatable; or a JSON file)"),
    window: int = typer.Option(None, "--window", help="short-run: " + doc(S, "window")),
    steps: int = typer.Option(None, "--steps", help="short-run: " + doc(S, "steps")),
    seeds: int = typer.Option(None, "--seeds", help="short-run: " + doc(S, "seeds")),
    max_seeds: int = typer.Option(None, "--max-seeds", help="short-run: " + doc(S, "max_seeds")),
    direction: str = typer.Option(None, "--direction", help="short-run: " + doc(S, "direction")),
    runner: str = typer.Option(None, "--runner", help="short-run: " + doc(S, "runner")),
    first_parent: bool = typer.Option(False, "--first-parent", help=doc(B, "first_parent")),
    timeout: float = typer.Option(None, "--timeout", help=doc(B, "timeout")),
    confirm_endpoints: bool = typer.Option(False, "--confirm-endpoints", help=doc(B, "confirm_endpoints")),
    verify: int = typer.Option(None, "--verify", help=doc(B, "verify")),
    jobs: int = typer.Option(1, "--jobs", "-j", help=doc(B, "jobs") + ", e.g. --jobs 4"),
    executor: str = typer.Option("local", "--executor", help=doc(B, "executor") + " (pip install "
                                 "'rlbisect[ray]'), e.g. --executor ray --jobs 8"),
    ray_address: str = typer.Option(None, "--ray-address", help=doc(B, "ray_address") + ", e.g. auto"),
    ray_gpus: float = typer.Option(None, "--ray-gpus", help=doc(B, "ray_gpus") + ", e.g. 1"),
    clone_url: str = typer.Option(None, "--clone-url", help=doc(B, "clone_url")),
    json_path: str = typer.Option(None, "--json", help="write the result as JSON to this file"),
    report_path: str = typer.Option(None, "--report", help="write a markdown report to this file"),
    plot_path: str = typer.Option(None, "--plot", help="write a PNG timeline of the probes to this file "
                                  "(short-run: also PLOT-evidence.png, the culprit's seeds vs GOOD's; "
                                  "--flaky: the runs at each commit and the culprit's posterior)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write .git/rlbisect/cache.jsonl"),
    flaky: bool = typer.Option(False, "--flaky", help=doc(B, "flaky") + "; bisects the first-parent chain"),
    per_commit: bool = typer.Option(False, "--per-commit", help=doc(B, "per_commit")),
    confidence: float = typer.Option(None, "--confidence", help=doc(B, "confidence")),
    max_runs: int = typer.Option(None, "--max-runs", help=doc(B, "max_runs")),
    min_effect: float = typer.Option(None, "--min-effect", help=doc(B, "min_effect") + ", e.g. 0.5"),
    terms: str = typer.Option(None, "--terms", metavar="OLD,NEW", help=doc(B, "terms")),
    find_fix: bool = typer.Option(False, "--find-fix", help="--terms broken,fixed: the first commit where "
                                  "the predicate passes"),
) -> None:
    """Find the first bad commit in GOOD..BAD with a real git bisect. Probes run in private
    checkouts: your working tree, index, refs, config and hooks are never touched.

    With -- CMD the command decides, as in git bisect run: exit 0 good, 125 skip, 1-127 bad, 128+
    aborts. It runs in a checkout of each commit, not in your folder.

    No verdict without evidence: if the answer rests on GOOD or BAD and no probe vouched for it,
    that endpoint is probed too, and with a quick predicate the answer's two commits are run once
    more (--verify). Exit 0 found; 3 no answer (only skipped commits left, --verify saw them answer
    differently, or --flaky not sure); 5 BAD passes the predicate; 6 GOOD fails it; 4 the
    predicate aborted; 2 bad input; 130/143 interrupted.

    Verdicts are cached by tree in .git/rlbisect/ (the one place rlbisect writes in your repository).

    Example: rlbisect run v1.2..main --timeout 600 --json bisect.json -- pytest -x tests/test_loss.py

    Example: rlbisect run v1.2..main --predicate short-run --steps 8 -- python train.py --seed {seed} --steps {steps} --out {out}/metrics.jsonl

    Example: rlbisect run v1.2..main --predicate short-run --metric eval_pass --steps 8 --seeds 3

    Example: rlbisect run v1.2..main --flaky --confidence 0.95 -- pytest -x tests/test_flaky_loss.py

    Example: rlbisect run v1.2..main --jobs 4 --executor ray --ray-address auto --ray-gpus 1 --predicate short-run

    With --find-fix (or --terms OLD,NEW) it finds the first commit where the predicate starts
    passing: it must fail at GOOD..BAD's first end (OLD) and pass at the second (NEW); 5 then
    means NEW still fails, 6 OLD already passes.

    Example: rlbisect run v1.2..main --find-fix --checks 1,6 --adapter my_trainer/rl_adapter.py:make_adapter
    """
    from rlbisect.bisect import BisectResult, bisect, make_predicate
    from rlbisect.cli.progress import live_progress
    from rlbisect.bisect.timeline import draw
    from rlbisect.bisect.terms import parse_terms
    from rlbisect._proc.editable import note as editable_note, own_imports
    from rlbisect.git.repo import Repo, probe_env
    from rlbisect.tinyagent import first_use_note
    given_adapter(adapter)
    finite(min_effect=min_effect, ray_gpus=ray_gpus)
    if terms is not None and find_fix:
        raise InputError("give --terms OLD,NEW or --find-fix (broken,fixed), not both")
    options = bisect_options(first_parent=first_parent, timeout=timeout, use_cache=not no_cache,
                             confirm_endpoints=confirm_endpoints, verify=verify, jobs=jobs, executor=executor,
                             ray_address=ray_address, ray_gpus=ray_gpus, clone_url=clone_url,
                             flaky=flaky, per_commit=per_commit, confidence=confidence, max_runs=max_runs, min_effect=min_effect,
                             terms=parse_terms(terms, find_fix))
    outputs = distinct({flag: output_path(p, flag, figure=flag == "--plot") for flag, p in
                        (("--json", json_path), ("--report", report_path), ("--plot", plot_path))})
    pred = make_predicate(predicate, command_ or [], options=dict(
        adapter=adapter, adapter_opts=_adapter_opts(adapter_opt),
        probe_seeds=probe_seed_list(None, probe_seeds) if probe_seeds else None, runs=runs,
        checks=_checks(checks),
        metric=metric,
        steps=steps, seeds=seeds, max_seeds=max_seeds,
        direction=direction, runner=runner, window=window, metrics_file=metrics_file,
        metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
        metric_map=parse_metric_map(metric_map) if metric_map else None))
    if flaky and hasattr(pred, "measures") and pred.measures is None:   # short runs without a --metric
        raise InputError("--flaky with short runs needs --metric M, whose values it pools: without one each "
                         "repeat trains the same seeds again and comes out the same, which --flaky would count "
                         "as new evidence")
    if per_commit and getattr(pred, "measures", None) is None:   # it changes nothing else: say so
        raise InputError("--per-commit keeps short runs with a --metric judged per commit: add "
                         "--predicate short-run --metric M")
    if not command_ and adapter is None and runner is None and (note := first_use_note()):
        typer.echo(f"{note}; the first probe pays it", err=True)   # TinyAgent's own trainer
    # the probes import the checkouts' code, not the editable install's: say so
    if folders := own_imports(root := Repo.open(repo).root, command_ or [sys.executable], probe_env()):
        typer.echo(editable_note(root, folders), err=True)
    with live_progress() as progress:
        try:
            result = bisect(repo, range_spec, pred, options, progress=progress)
        except Interrupted as e:
            result = cast(BisectResult, e.partial)   # the bisect's partial result
    if outputs["--json"]:
        outputs["--json"].write_text(json_text(result.to_json()) + "\n")
    if outputs["--plot"]:
        for extra_plot, what in draw(result, outputs["--plot"])[1:]:
            typer.echo(f"wrote {extra_plot} ({what})")
    if report := outputs["--report"]:   # the figure linked from where the report is
        plot = outputs["--plot"] and Path(os.path.relpath(outputs["--plot"].resolve(), report.resolve().parent))
        report.write_text(result.markdown(plot))
    typer.echo(result.summary())
    raise typer.Exit(result.exit_code)
