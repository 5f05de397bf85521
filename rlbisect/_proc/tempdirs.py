"""rlbisect's temporary directories, marked as its own so that a later run may sweep them.

A run killed outright (SIGKILL, a lost node) leaves its directories behind; the next run removes
them (:func:`sweep_stale`), but only directories that carry this machine's mark and whose run is
gone: never a user's folder that only looks like ours (``/tmp/rlbisect-2026-results``), and never
the live directory of a run in another container that shares ``/tmp`` but not our process ids.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

MARK = ".rlbisect-owned"


def _here() -> str:
    """This host and pid namespace: where a pid in a directory's name can be looked up."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()} {ns}"


def owned_tempdir(kind: str = "") -> Path:
    """A fresh ``rlbisect-<pid>-<kind>...`` directory in the temp dir, marked as this run's."""
    path = Path(tempfile.mkdtemp(prefix=f"rlbisect-{os.getpid()}-{kind + '-' if kind else ''}"))
    (path / MARK).write_text(_here() + "\n")
    return path


def sweep_stale() -> None:
    """Remove the marked directories of rlbisect runs that died without cleaning up."""
    here = _here()
    for tmp in Path(tempfile.gettempdir()).glob("rlbisect-*-*"):
        m = re.match(r"rlbisect-(\d+)-", tmp.name)
        if not m or int(m[1]) == os.getpid():
            continue
        try:
            if tmp.is_symlink() or not tmp.is_dir() or tmp.stat().st_uid != os.getuid() \
                    or (tmp / MARK).read_text().strip() != here:
                continue
            os.kill(int(m[1]), 0)
            continue   # still running
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except OSError:   # no mark (not ours), or not ours to judge
            continue
