"""``python -m rlbisect``: the CLI, with the current folder first on ``sys.path`` (so a training
command run in a probe checkout imports that checkout's trainer)."""

from rlbisect.cli import main

main()
