"""Fixtures of the bisect tests: the state-file predicate and an in-process CLI runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from typer.testing import CliRunner

from rlbisect.cli.app import app

#: The ``state`` file decides: good -> 0, skip -> 125, bad -> 1, a number -> that exit code.
STATE_CMD = ["sh", "-c", 'case "$(cat state)" in good) exit 0;; skip) exit 125;; '
             'bad) exit 1;; *) exit "$(cat state)";; esac']


@pytest.fixture
def state_cmd() -> list[str]:
    return list(STATE_CMD)


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., tuple[int, str, dict | None]]:
    """``run_cli(args) -> (exit_code, stdout+stderr, json or None)``, in-process via CliRunner.

    A ``--json`` file is added automatically (unless ``json=False``) and parsed.
    """
    counter = iter(range(10_000))

    def run(args: list[str], json_out: bool = True) -> tuple[int, str, dict | None]:
        out = tmp_path / f"result-{next(counter)}.json"
        extra = ["--json", str(out)] if json_out else []
        if "--" in args:
            i = args.index("--")
            args = args[:i] + extra + args[i:]
        else:
            args = args + extra
        res = CliRunner().invoke(app, ["run", *args])
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        data = json.loads(out.read_text()) if out.exists() else None
        return res.exit_code, res.output, data
    return run
