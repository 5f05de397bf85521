"""The command line: parse, call the library, print. Each command's docstring is its help, with an example."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Regression hunting for RL training code: invariants, bisect, replayable steps.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
