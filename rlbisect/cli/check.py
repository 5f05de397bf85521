"""``rlbisect check``: the invariants through a trainer's own code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import typer

from rlbisect.cli.common import finite, given_adapter, json_text, output_path, probe_seed_list
from rlbisect.cli.train import seed_in_range
from rlbisect.errors import CannotRun, InputError, RlbisectError, printable


def check_cmd(
    ctx: typer.Context,
    adapter: str = typer.Option(None, "--adapter", help="MODULE:FACTORY or FILE.py:FACTORY (default: TinyAgent's)"),
    bug: str = typer.Option(None, "--bug", help="inject a code fault (adapters that accept `bug`)"),
    episodes: int = typer.Option(64, "--episodes", min=1, help="episodes in the probe batch"),
    seed: int = typer.Option(None, "--seed", help="seed of the probe batch (default 1)"),
    probe_seeds: str = typer.Option(None, "--probe-seeds", help="several probe batches, e.g. 1,2,3: a check fails if it fails on any"),
    adapter_opt: list[str] = typer.Option(None, "--adapter-opt", help="KEY=VALUE for the adapter's factory, repeatable: "
                                          "check at the trainer's settings, e.g. temperature=0.7"),
    kl_coef: float = typer.Option(0.1, "--kl-coef", min=0, help="KL weight, so the reference check applies (0: none)"),
    as_json: bool = typer.Option(False, "--json", help='print {check: {"value", "passed"}}'),
    matrix: bool = typer.Option(False, "--matrix", help="run with no fault and with each fault the adapter lists"),
    runs: bool = typer.Option(True, "--runs/--no-runs", help="the run-level checks too: a few real steps of the "
                              "trainer's loop, watched (--no-runs: the step-0 checks only)"),
    plot: str = typer.Option(None, "--plot", help="with --matrix: draw the matrix as a PNG heatmap"),
    jobs: int = typer.Option(None, "--jobs", "-j", min=1, help="with --matrix: rows checked at once, each in a "
                             "forked process (default: this machine's cores)"),
    thresholds: str = typer.Option(None, "--thresholds", help="fp32 (default), bf16, or a JSON file of limits"),
    checks: list[str] = typer.Option(None, "--checks", metavar="N,NAME,...", help="only these checks, by number (report order: "
                                     "the step-0 checks, then the run-level ones) or name, comma-separated, "
                                     "e.g. 1,6,16; the others are not reported and never fail the check"),
) -> None:
    """Run the step-0 invariants on one probe batch through the trainer's own code.

    Exit 0 when no check fails and one ran (an n/a check is neither a pass nor a failure), 1 when
    one fails or the code under test raises or goes NaN under them, 2 on bad input (an option; an
    --adapter naming no module, file or registered adapter), 125 when the checks could not run at
    all: the adapter does not fit this code (it or the trainer fails to import, its factory is
    missing or cannot build the trainer, it raises rlbisect.errors.CannotRun), every selected
    check is n/a, or the code under test ended the process during them (sys.exit, os._exit, a
    signal); inside a bisect, an --adapter not found at this commit too. 125 is git bisect
    run's skip, so a bisect goes around such commits.

    Example: rlbisect check --bug sign_flip          (or: --adapter my_trainer/rl_adapter.py:make_adapter)

    Example: rlbisect check --matrix --jobs 2 --json --plot matrix.png

    Example: rlbisect check --probe-seeds 1,2,3 --adapter-opt temperature=0.7 --adapter-opt loss_mode=seq_mean_token_mean

    Example: rlbisect check --checks 1,6,16 --no-runs          (or: --checks "mask = policy tokens")
    """
    from rlbisect.bisect.predicates.invariants import run_selected, runs_needed, select_checks
    from rlbisect.check import DEFAULT_ADAPTER, check_matrix, load_adapter
    from rlbisect.check.loading import check_options
    from rlbisect.check.adapter import parse_adapter_opts
    from rlbisect.check.invariants import as_json as to_json
    from rlbisect.check.results import exit_code
    from rlbisect.check.thresholds import Thresholds
    from rlbisect._proc.forked import usable_cores
    from rlbisect._proc.quiet import stdout_to_stderr
    from rlbisect._proc.startup import defer_dynamo
    from rlbisect.tinyagent import first_use_note
    given_adapter(adapter)
    finite(kl_coef=kl_coef)       # an infinite KL weight gave NaN losses: five FAILs blamed on the trainer
    if matrix and bug is not None:      # each row switches its own fault: --bug was silently dropped
        raise InputError("--matrix checks every fault the adapter lists, one row each: leave out --bug "
                         "(or drop --matrix to check that fault alone)")
    if (plot or jobs) and not matrix:
        raise InputError(f"{'--plot draws' if plot else '--jobs runs rows of'} the matrix: add --matrix")
    plot_out, spec = output_path(plot, "--plot", figure=True), adapter or DEFAULT_ADAPTER
    seeds, opts = probe_seed_list(seed, probe_seeds), parse_adapter_opts(adapter_opt, {
        "bug": "--bug", "seed": "--seed or --probe-seeds", "episodes": "--episodes", "kl_coef": "--kl-coef"})
    for probe_seed in seeds:
        seed_in_range(probe_seed, "--seed" if probe_seeds is None else "--probe-seeds")
    limits = Thresholds.named(thresholds)
    only = select_checks(checks) if checks else None
    runs_needed(only, runs)     # run-level checks selected with --no-runs: refused before any work
    if bug is not None and not bug.strip():       # no adapter has a fault without a name
        raise InputError("--bug: give a fault's name (an unknown one lists them)")
    # --episodes and --kl-coef left at their defaults reach only a factory that takes them: one
    # with no options (docs/checks.md's template) was refused over options nobody gave
    given = {k: v for k, v in (("episodes", episodes), ("kl_coef", kl_coef))
             if getattr(ctx.get_parameter_source(k), "name", "") != "DEFAULT"}   # typer vendors its click
    defaults = {k: v for k, v in (("episodes", episodes), ("kl_coef", kl_coef)) if k not in given}
    seed_given = seed is not None or probe_seeds is not None

    def factory_options(probe_seed: int) -> dict:       # the probe seed too, when nobody gave one
        seeded = {"seed": probe_seed}
        return {"defaults": {**defaults, **({} if seed_given else seeded)}, **given,
                **(seeded if seed_given else {}), **opts}
    defer_dynamo()        # the checks never compile: see rlbisect._proc.startup

    def ready() -> None:  # before any work or word: a mistyped option is one line
        try:
            with stdout_to_stderr(as_json):     # it imports the adapter's file: its prints must not break the JSON
                check_options(spec, bug=bug, **factory_options(seeds[0]))
        except RlbisectError as e:
            raise adapter_failure(spec, e) from None
        if spec == DEFAULT_ADAPTER and (note := first_use_note()):
            typer.echo(note, err=True)
        if adapter is None and not as_json:     # in a user's repository this is not their trainer
            typer.echo("checking TinyAgent, rlbisect's embedded example trainer (give --adapter "
                       "MODULE:FACTORY or FILE.py:FACTORY to check yours)", err=True)

    def make(fault, probe_seed):
        try:
            return load_adapter(spec, bug=fault, **factory_options(probe_seed))
        except RlbisectError as e:
            raise adapter_failure(spec, e) from None
    if matrix:
        fresh = _in_a_child(lambda: _starts_threads(ready))
        def shown(results: dict) -> dict:
            return results if only is None else {n: r for n, r in results.items() if n in only}
        with stdout_to_stderr(as_json):      # the trainer's own prints must not break the JSON
            rows = _no_answer_if_ended(lambda: check_matrix(
                make, seeds, limits, on_row=None if as_json else lambda f, r: _print_matrix_row(f, shown(r)),
                runs=runs_needed(only, runs), jobs=jobs or usable_cores(), only=only, fresh=fresh))
            table = {row: to_json(shown(r)) for row, r in rows.items()}
        if plot_out:
            from rlbisect.plots import matrix_heatmap
            matrix_heatmap(table, plot_out)
        if as_json:
            typer.echo(json_text(table))
        raise typer.Exit(exit_code(c["passed"] for c in table["none"].values()))

    def checked() -> dict:   # all in the child: the adapter's module, and threads it starts, stay out of here
        ready()
        with stdout_to_stderr(as_json):
            return run_selected(lambda probe_seed: make(bug, probe_seed), seeds, limits, runs, only)
    results = _in_a_child(checked)
    if as_json:
        typer.echo(json_text(to_json(results)))
    else:
        width = max(len(name) for name in results)
        for r in results.values():
            at = f"  (probe seed {r.seed})" if len(seeds) > 1 and r.failed and r.seed is not None else ""
            if r.na:
                typer.echo(f"{r.name:<{width}} {'n/a':>10}  ({r.na})")
            elif r.by_design:
                typer.echo(f"{r.name:<{width}} {r.value:10.3g}  by design: {r.by_design}")
            else:
                typer.echo(f"{r.name:<{width}} {r.value:10.3g}  {'FAIL' if r.failed else 'ok'}{at}"
                           + (_where(r) if r.failed else ""))
        typer.echo(_summary(results, only is None))
    raise typer.Exit(exit_code(r.passed for r in results.values()))


def _in_a_child(checks):
    """The checks in a child process: code under test that ends it (``sys.exit(0)``, ``os._exit(0)``)
    left this command's exit 0 with nothing printed, a pass to ``git bisect run``; now it is
    exit 125, no verdict, as the bisect's own predicate skips such a probe."""
    from rlbisect._proc.forked import isolated
    return _no_answer_if_ended(lambda: isolated(checks))


def _starts_threads(importing) -> bool:
    """Whether ``importing()`` (the adapter's module) leaves threads running: a matrix row forked
    after such an import lacks them and can hang, so its rows then import it themselves (2.5 s a
    row for TRL's demo, against one import for all when it starts none)."""
    import threading
    before = threading.active_count()
    importing()
    return threading.active_count() > before


def _no_answer_if_ended(work):
    from rlbisect._proc.forked import ChildEnded
    try:
        return work()
    except ChildEnded as e:
        raise CannotRun(f"the checks ended without an answer: the process running them ended ({e.how}) during "
                        "them: the code under test ended it, or a signal (the OOM killer?) did") from None


def _summary(results: dict, every: bool) -> str:
    """The last line: which failed, else "all passed" only when every check ran, else the counts
    (an n/a is neither a pass nor a failure: "all 3 selected checks passed" of three n/a misled)."""
    from rlbisect.check.results import tally
    ok, failed, na = tally(r.passed for r in results.values())
    designed = [r.name for r in results.values() if r.by_design]
    checks = "checks" if every else "selected checks"
    could_not = f"{na} could not run (n/a)"
    if failed:
        line = "FAILED: " + "; ".join(r.name for r in results.values() if r.failed) \
            + f" ({ok} passed, {failed} failed" + (f", {could_not})" if na else ")")
    elif not ok:
        line = f"none of the {na} {checks} could run (n/a): nothing was checked"
    elif na:
        line = f"{ok} of {ok + na} {checks} passed, {could_not}, none failed"
    else:
        line = "all checks passed" if every else f"all {ok} selected checks passed"
    return line + (f" ({len(designed)} by design: {'; '.join(designed)})" if designed else "")


def _print_matrix_row(fault, results) -> None:
    cells = " ".join(f"{'n/a' if r.na else 'bd' if r.by_design else 'ok' if r.passed else 'FAIL':>4}"
                     for r in results.values())
    typer.echo(f"{fault or 'none':<15} {cells}")


def _where(r) -> str:
    """A failing check's setting and what went wrong: ``  at "temperature 0.7": <detail>``."""
    at = f'at "{printable(r.setting)}"' if r.setting else ""
    said = ": ".join(x for x in (at, printable(r.detail)) if x)
    return f"  {said}" if said else ""


def adapter_failure(spec: str, error: RlbisectError) -> RlbisectError:
    """What an adapter that could not be loaded or built means for the exit code. One that does
    not fit this code is :class:`~rlbisect.check.loading.AdapterUnfit` already (exit 125); a spec
    that names nothing, or an option the adapter does not take (``OptionRefused``), is bad input
    (exit 2) by hand, and inside a bisect (:func:`in_a_bisect`) means this commit predates the
    adapter or the option: the checks cannot run here (exit 125)."""
    from rlbisect.check.loading import AdapterNotFound, AdapterUnfit, OptionRefused
    if isinstance(error, (AdapterNotFound, OptionRefused)) and not in_a_bisect():
        return InputError(str(error))     # by hand an option the adapter does not take is the caller's mistake
    if isinstance(error, (AdapterUnfit, AdapterNotFound)):
        return CannotRun(f"cannot run the checks here: {error}")
    return error


def in_a_bisect() -> bool:
    """Whether this check is a bisect's probe: ``rlbisect run``'s command predicate says so
    (``RLBISECT_PROBE``), or git has a bisect in progress here (``git bisect run``)."""
    if os.environ.get("RLBISECT_PROBE"):
        return True
    try:
        done = subprocess.run(["git", "rev-parse", "--git-path", "BISECT_START"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and Path(done.stdout.strip()).is_file()
