"""Build a simulated history: a git repository holding a copy of `reference_trainer/`, then N
commits of real code changes, one of which introduces a fault.

Commits have fixed authors and dates, so the same arguments give the same commit ids on every
machine: a kept history can be reused, and with it the bisect cache in its `.git/rlbisect/`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from rlbisect.errors import GitError
from rlbisect.git.repo import git

from .edits import BENIGN, FAULTS, Edit

_ENV = {"GIT_AUTHOR_NAME": "TinyAgent Dev", "GIT_AUTHOR_EMAIL": "dev@tinyagent.example",
        "GIT_COMMITTER_NAME": "TinyAgent Dev", "GIT_COMMITTER_EMAIL": "dev@tinyagent.example"}
MARKER = "rlbisect-fixture.json"   # in the git dir: what this history was built from


@dataclass
class History:
    path: str
    good: str              # the initial import (known good)
    bad: str               # the tip (known bad)
    fault: str
    fault_commit: str      # the commit that injected the fault
    commits: list          # [(sha, subject)] after the initial import, oldest first


def _git(repo: Path, *args: str, when: int = 0) -> str:
    env = {**_ENV, "GIT_AUTHOR_DATE": f"{1767225600 + 3600 * when} +0000",
           "GIT_COMMITTER_DATE": f"{1767225600 + 3600 * when} +0000"}
    return git(repo, "-c", "commit.gpgsign=false", *args, env=env).strip()


def _apply(root: Path, edit: Edit) -> None:
    for name, old, new in edit.changes:
        path = root / "reference_trainer" / name
        text = path.read_text()
        if text.count(old) != 1:
            raise ValueError(f"fixture edit {edit.message!r} no longer applies to {name}: "
                             f"expected its text once, found it {text.count(old)} times")
        path.write_text(text.replace(old, new))


def _source() -> Path:
    import reference_trainer
    return Path(reference_trainer.__file__).parent


def build_history(dest: str | Path, fault: str = "sign_flip", commits: int = 8, bad_at: int = 3) -> History:
    """Build into `dest` (must not exist, or be empty). `bad_at` is the fault commit's position
    among the `commits` commits after the initial import (1 = the first, `commits` = the tip)."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
    if commits < 1:
        raise ValueError("commits must be at least 1")
    if not 1 <= bad_at <= commits:
        raise ValueError(f"bad_at must be between 1 and {commits}, not {bad_at}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    pkg = dest / "reference_trainer"
    pkg.mkdir()
    for f in sorted(_source().glob("*.py")):
        shutil.copy(f, pkg / f.name)
    (dest / "README.md").write_text("TinyAgent, a simulated history for `rlbisect demo`.\n")
    (dest / ".gitignore").write_text("__pycache__/\n")
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "TinyAgent: initial import")
    good = _git(dest, "rev-parse", "HEAD")
    log, fault_commit, benign = [], "", iter(BENIGN)
    for i in range(1, commits + 1):
        edit = FAULTS[fault] if i == bad_at else next(benign, None)
        if edit is not None:
            _apply(dest, edit)
            message = edit.message
        else:   # more commits than benign edits: notes, as real histories have
            notes = dest / "NOTES.md"
            notes.write_text((notes.read_text() if notes.exists() else "") + f"- run log {i}: nothing new\n")
            message = f"notes: run log {i}"
        _git(dest, "add", "-A")
        _git(dest, "commit", "-q", "-m", message, when=i)
        sha = _git(dest, "rev-parse", "HEAD")
        log.append((sha, message))
        if i == bad_at:
            fault_commit = sha
    history = History(str(dest), good, log[-1][0], fault, fault_commit, log)
    git_dir = Path(_git(dest, "rev-parse", "--absolute-git-dir"))
    (git_dir / MARKER).write_text(json.dumps(asdict(history), indent=1))
    return history


def load_history(path: str | Path) -> History | None:
    """The History recorded in a repository built by `build_history`, or None."""
    try:
        git_dir = Path(_git(Path(path), "rev-parse", "--absolute-git-dir"))
        doc = json.loads((git_dir / MARKER).read_text())
        return History(**dict(doc, commits=[tuple(c) for c in doc["commits"]]))
    except (OSError, ValueError, TypeError, GitError):
        return None
