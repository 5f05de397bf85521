"""``rlbisect warm``: start, stop or ask after the server that keeps torch imported."""

from __future__ import annotations

import typer


def warm_cmd(
    action: str = typer.Argument(..., help="start, stop or status"),
    idle: float = typer.Option(30.0, "--idle", min=0.1, help="with start: minutes without a check before it exits"),
) -> None:
    """Keep torch imported in a server this user's `rlbisect check` and the probes of `rlbisect run`
    hand their work to: a check then costs its own work (about 0.4 s on TinyAgent) instead of
    1.5-2 s, with the same output byte for byte. Only a caller whose interpreter, sys.path and
    environment match is served; anything else runs cold (a check says so). RLBISECT_COLD=1 never
    uses it.

    Exit 0 done (status: a server is up), 1 status: none is up, 2 it could not start.

    Example: rlbisect warm start --idle 60 && rlbisect check && rlbisect warm stop
    """
    from rlbisect.errors import InputError
    from rlbisect._proc.client import WarmError, start, status, stop
    if action not in ("start", "stop", "status"):
        raise InputError(f"unknown action {action!r}: start, stop or status")
    up: dict | None
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
