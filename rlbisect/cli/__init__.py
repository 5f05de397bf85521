"""The command line: one thin module per command (parse, call one library function, print).

:func:`main` is the console entry point. It first offers ``rlbisect check`` to a running warm
server (:mod:`rlbisect._proc.client`, before anything heavy is imported: handing a check over
costs about 50 ms where importing torch costs a second), and otherwise runs the command here.
"""

from __future__ import annotations

import sys


def main() -> None:
    """The console entry point (``rlbisect``)."""
    from rlbisect._proc.client import forward
    code = forward(sys.argv[1:])
    if code is None:
        from rlbisect.cli.app import main as run_here
        run_here()
    sys.stdout.flush()
    raise SystemExit(code)
