"""tempdirs.py: a later run sweeps what a killed run left, and nothing that is not rlbisect's."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rlbisect._proc.tempdirs import MARK, _here, owned_tempdir, sweep_stale


def test_the_next_run_removes_what_a_killed_run_left_and_only_that():
    dead = subprocess.Popen(["true"])
    dead.wait()
    tmp = Path(tempfile.gettempdir())
    stale, live = tmp / f"rlbisect-{dead.pid}-stale", tmp / f"rlbisect-{os.getppid()}-live"
    users = tmp / f"rlbisect-{dead.pid}-results"          # a user's folder that only looks like ours
    elsewhere = tmp / f"rlbisect-{dead.pid}-container"    # a run in another pid namespace sharing /tmp
    try:
        for d in (stale, live, users, elsewhere):
            (d / "repo").mkdir(parents=True)
        for d in (stale, live):
            (d / MARK).write_text(_here() + "\n")
        (elsewhere / MARK).write_text("otherhost pid:[1]\n")
        (users / "notes.txt").write_text("precious")
        sweep_stale()
        assert not stale.exists() and live.exists() and elsewhere.exists()
        assert (users / "notes.txt").read_text() == "precious"
    finally:
        for d in (stale, live, users, elsewhere):
            shutil.rmtree(d, ignore_errors=True)


def test_an_owned_directory_is_named_for_this_run_and_marked():
    d = owned_tempdir("run")
    try:
        assert d.name.startswith(f"rlbisect-{os.getpid()}-run-") and (d / MARK).read_text().strip() == _here()
    finally:
        shutil.rmtree(d)
