"""Probe results remembered across runs, keyed by the commit's tree and everything the predicate sees.

The file is ``<git-common-dir>/rlbisect/cache.jsonl`` (``.git/rlbisect/cache.jsonl`` in a normal
clone): one JSON object per line, appended as soon as a probe finishes, so a run that is killed
keeps everything it learned and a restarted bisect re-runs nothing it already knows.
``.git/rlbisect/`` is the only place rlbisect writes in a user's repository; deleting it is always
safe.

The key is the *tree* hash (same files => same verdict, whatever the commit message or parents)
plus a hash of the :func:`identity`: the predicate's own identity (its command, the files it
names, its options), the interpreter and the distributions installed for it (:func:`packages`),
and the environment the predicate runs in, less the variables in :data:`VOLATILE` (a shell's and
a terminal's bookkeeping, and how rlbisect itself runs), each variable as its name and a keyed
digest of its value. The identity is stored too, so a person can read what produced a line. A
file the predicate reads without naming it cannot be part of the key: ``--verify`` re-runs the
answer's two commits, which catches a verdict that no longer holds.

Every row is kept. When the rows of one key disagree (a flaky predicate, or something outside
the key changed), the cache recalls nothing for it: the commit is probed again and the report says
so (:class:`Recalled`). Not cached: probes whose cause says nothing about the code (our timeouts,
machinery failures, interruptions) and aborts. A command's exit 125 is cached: the command itself
said the tree is untestable.

A noisy predicate (``--flaky``) never recalls a verdict: each run is a fresh sample. Its runs are
appended under a separate identity (:func:`flaky_identity`), so a deterministic bisect never takes
one as the tree's truth, and a later ``--flaky`` bisect starts from all of them (:meth:`runs`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import time
from importlib import metadata
from dataclasses import dataclass, field
from pathlib import Path

from rlbisect.bisect.predicates import Predicate, Probe
from rlbisect.errors import Verdict
from rlbisect._proc.editable import outside_state
from rlbisect.git.repo import probe_env

CACHE_DIR = "rlbisect"
CACHE_FILE = "cache.jsonl"
#: Variables that change between shells and logins but not what a predicate does.
VOLATILE = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "LS_COLORS",
                      "PS1", "PS2", "PROMPT_COMMAND", "HISTFILE", "HISTSIZE", "WINDOWID", "DISPLAY",
                      "XAUTHORITY", "MAIL", "TMUX", "TMUX_PANE", "STY", "RLBISECT_COLD", "RLBISECT_WARM_DIR"})
#: ...and every variable that starts with one of these (an SSH login's, a desktop session's, a
#: terminal's, pytest's per-test bookkeeping).
VOLATILE_PREFIXES = ("SSH_", "XDG_SESSION", "XDG_VTNR", "DBUS_", "WAYLAND_", "TERM_", "VSCODE_", "ITERM_",
                     "KONSOLE_", "GNOME_", "DESKTOP_", "PYTEST_")


def identity(predicate: Predicate, key: bytes = b"", root: Path | None = None) -> str:
    """The cache identity of ``predicate`` run here: what it is, the interpreter and its installed
    packages (and the code of those installed editable from outside the repository at ``root``:
    :func:`~rlbisect._proc.editable.outside_state`), the environment: each variable's name and a
    digest of its value keyed with ``key`` (:meth:`ProbeCache.key`), never the value. The identity
    is in every cache row, the JSON and the report, an environment holds tokens, and a digest
    without a secret key gives a short password back to a dictionary."""
    env = {k: hmac.new(key, f"{k}={v}".encode(), "sha256").hexdigest()[:16] for k, v in probe_env().items()
           if k not in VOLATILE and not k.startswith(VOLATILE_PREFIXES)}
    editable = outside_state(root, [sys.executable], probe_env())   # only where there is one: rows cached before keep
    return json.dumps({"predicate": predicate.identity(), "python": sys.executable,
                       "python_version": sys.version.split()[0], "packages": packages(), "env": env,
                       **({"editable": editable} if editable else {})}, sort_keys=True)


def packages() -> str:
    """A digest of the distributions installed for this interpreter, each as name and version,
    sorted: a ``pip install -U torch`` between two bisects is another predicate, never a recall.
    One read of each distribution's metadata (tens of ms); a module dropped into site-packages
    without metadata is not seen (``--verify`` is the net for that)."""
    seen = set()
    for dist in metadata.distributions():
        try:
            seen.add(f"{(dist.metadata['Name'] or '').lower()}=={dist.version}")
        except Exception:   # a broken .dist-info: what it says, as well as it says it
            seen.add(str(getattr(dist, "_path", "?")))
    return hashlib.sha256("\n".join(sorted(seen)).encode()).hexdigest()[:16]


def flaky_identity(identity: str) -> str:
    """Cache identity of a predicate's ``--flaky`` runs, apart from its deterministic verdicts."""
    return json.dumps({"kind": "flaky", "predicate": identity})


def predicate_key(identity: str) -> str:
    """Short stable hash of a predicate identity."""
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def row_probe(row: dict) -> Probe:
    """A cached row as the probe it recorded, all of it (``detail`` holds a run's fingerprint)."""
    return Probe(Verdict(row["verdict"]), dict(row.get("values", {})), row.get("reason", ""),
                 float(row.get("seconds", 0.0)), row.get("cause"), output=row.get("output", ""),
                 detail=row.get("detail") or {})


@dataclass
class Recalled:
    """What the cache knows of one tree under one identity."""

    probe: Probe | None = None      # the verdict every row agrees on (the latest row), else None
    recorded: str = ""              # when that row was written
    disagree: list[str] = field(default_factory=list)   # the verdicts the rows gave, when they differ


class ProbeCache:
    """Append-only JSONL store of probe results. ``enabled=False`` reads and writes nothing."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path = path
        self.enabled = enabled
        self._rows: dict[tuple[str, str], list[dict]] | None = None
        self._key = secrets.token_hex(32).encode()   # a run without the cache: its own

    def key(self) -> bytes:
        """The secret the environment's digests are keyed with: made once beside the cache,
        readable by its owner only, so the same environment keeps its identity across runs."""
        path = self.path.parent / "key"
        if self.enabled:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, self._key)
                finally:
                    os.close(fd)
            except FileExistsError:
                pass
            except OSError as e:  # a read-only .git: no cache, and this run's own key
                self._give_up(e)
                return self._key
            try:
                return path.read_bytes().strip() or self._key
            except OSError as e:
                self._give_up(e)
        return self._key

    @classmethod
    def for_git_dir(cls, common_dir: Path, enabled: bool = True) -> "ProbeCache":
        """The cache of the repository whose shared git dir is ``common_dir``."""
        return cls(common_dir / CACHE_DIR / CACHE_FILE, enabled)

    def _lines(self) -> list[dict]:
        try:
            text = self.path.read_text(errors="replace") if self.path.exists() else ""
        except OSError as e:
            self._give_up(e)
            return []
        rows = []
        for line in text.splitlines():
            try:  # a run killed mid-write leaves at most one torn last line
                row = json.loads(line)
                if row["verdict"] in ("good", "bad", "skip"):
                    rows.append(row)
            except (ValueError, KeyError, TypeError):
                continue
        return rows

    def _load(self) -> dict[tuple[str, str], list[dict]]:
        if self._rows is None:
            self._rows = {}
            for row in self._lines():
                self._rows.setdefault((row["tree"], row["predicate"]), []).append(row)
        return self._rows

    def recall(self, tree: str, identity: str) -> Recalled:
        """What is remembered for this tree and identity (see :class:`Recalled`)."""
        rows = self._load().get((tree, predicate_key(identity)), []) if self.enabled else []
        verdicts = sorted({r["verdict"] for r in rows})
        if len(verdicts) > 1:
            return Recalled(disagree=verdicts)
        return Recalled(row_probe(rows[-1]), rows[-1].get("recorded", "")) if rows else Recalled()

    def get(self, tree: str, identity: str) -> Probe | None:
        """The remembered probe for this tree and identity, or None (nothing, or rows that disagree)."""
        return self.recall(tree, identity).probe

    def put(self, tree: str, commit: str, identity: str, probe: Probe) -> bool:
        """Append one result (if cacheable); returns whether it was written."""
        if not self.enabled or not probe.cacheable:
            return False
        row = {"tree": tree, "predicate": predicate_key(identity), "commit": commit,
               "verdict": probe.verdict, "cause": probe.cause, "values": probe.values, "reason": probe.reason,
               "seconds": round(probe.seconds, 4), "output": probe.output, "detail": probe.detail,
               "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "identity": identity}
        line = json.dumps(row, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One write() on an O_APPEND descriptor: concurrent runs never interleave a line. A row
            # torn by a killed run is ended first, or this one would be glued to it and lost too.
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                os.write(fd, (("\n" if torn else "") + line).encode())
            finally:
                os.close(fd)
        except OSError as e:  # a read-only .git must not stop the bisect
            self._give_up(e)
            return False
        self._load().setdefault((tree, predicate_key(identity)), []).append(json.loads(line))
        return True

    def runs(self, identity: str, trees: set[str]) -> list[dict]:
        """Every row recorded under ``identity`` for ``trees``, oldest first (not only the last)."""
        if not self.enabled:
            return []
        key = predicate_key(identity)
        return [row for row in self._lines() if row["predicate"] == key and row["tree"] in trees]

    def _give_up(self, error: OSError) -> None:
        print(f"rlbisect: cache disabled, cannot use {self.path}: {error.strerror}",
              file=sys.stderr)
        self.enabled = False
