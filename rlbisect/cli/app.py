"""The Typer application: every command registered from one table, errors as one line.

Each command lives in its own module (parse, call one library function, print); its docstring is
its help, with an example, and option help comes from the documented config models where one
exists. :data:`COMMANDS` is the table the application and the tests iterate.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import typer

from rlbisect.cli import check, compare, demo, plot, run, steps, train, warm
from rlbisect.errors import RlbisectError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,   # help is plain text: [ray] and [-- CMD] must survive
                  help="Regression hunting for RL training code: invariants, bisect, replayable steps.")

#: name -> the function behind ``rlbisect NAME`` (and its Typer settings)
COMMANDS: dict[str, tuple[Callable, dict]] = {
    "train": (train.train_cmd, {}),
    "demo": (demo.demo_cmd, {}),
    "check": (check.check_cmd, {}),
    "run": (run.run_cmd, {}),
    # "--vs" splits the runs: it must reach the command as an argument, not as an unknown option
    "compare": (compare.compare_cmd, {"context_settings": {"ignore_unknown_options": True}}),
    "plot": (plot.plot_cmd, {}),
    "inspect": (steps.inspect_cmd, {}),
    "replay": (steps.replay_cmd, {}),
    "promote": (steps.promote_cmd, {}),
    "warm": (warm.warm_cmd, {}),
}


def _one_line_errors(name: str, fn: Callable) -> Callable:
    """The command, with its :class:`RlbisectError` turned into one line and its exit code."""
    @functools.wraps(fn)
    def run_it(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RlbisectError as e:
            typer.echo(f"rlbisect {name}: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
    return run_it


for _name, (_fn, _settings) in COMMANDS.items():
    app.command(_name, **_settings)(_one_line_errors(_name, _fn))


def _version(shown: bool) -> None:
    if shown:
        from rlbisect import __version__
        typer.echo(f"rlbisect {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                          help="print rlbisect's version and exit")) -> None:
    """Regression hunting for RL training code: invariants, bisect, replayable steps."""


def main() -> None:
    """Console entry point: usage errors become one line on stderr and exit 2 (no usage box)."""
    from rlbisect._proc.startup import exit_now
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
