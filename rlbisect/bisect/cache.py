"""Probe results remembered across runs, keyed by the commit's tree and the predicate.

The file is ``<git-common-dir>/rlbisect/cache.jsonl`` (``.git/rlbisect/cache.jsonl`` in a
normal clone): one JSON object per line, appended as soon as a probe finishes, so a run that is
killed keeps everything it learned and a restarted bisect re-runs nothing it already knows.
``.git/rlbisect/`` is the only place rlbisect writes in a user's repository; deleting it is
always safe. The key is the *tree* hash (same files => same verdict, whatever the commit
message or parents) plus a hash of the predicate's ``identity()``; the identity is stored too,
so a person can read which command produced a line. The last line for a key wins.

Not cached: probes whose cause says nothing about the code (:data:`~rlbisect.bisect.predicates.TRANSIENT`:
our own timeouts, machinery failures, interruptions: a retry may succeed) and aborts. A command's exit 125 is cached: the
command itself said the tree is untestable.

A noisy predicate (``--flaky``) never recalls a verdict: each run is a fresh sample. Its runs are
appended under a separate identity (:func:`flaky_identity`), so a deterministic bisect never takes
one as the tree's truth, and a later ``--flaky`` bisect starts from all of them (:meth:`runs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rlbisect.bisect.predicates import Probe
from rlbisect.errors import Verdict

CACHE_DIR = "rlbisect"
CACHE_FILE = "cache.jsonl"


def flaky_identity(identity: str) -> str:
    """Cache identity of a predicate's ``--flaky`` runs, apart from its deterministic verdicts."""
    return json.dumps({"kind": "flaky", "predicate": identity})


def predicate_key(identity: str) -> str:
    """Short stable hash of a predicate identity."""
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


class ProbeCache:
    """Append-only JSONL store of probe results. ``enabled=False`` reads and writes nothing."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path = path
        self.enabled = enabled
        self._rows: dict[tuple[str, str], dict] | None = None

    @classmethod
    def for_git_dir(cls, common_dir: Path, enabled: bool = True) -> "ProbeCache":
        """The cache of the repository whose shared git dir is ``common_dir``."""
        return cls(common_dir / CACHE_DIR / CACHE_FILE, enabled)

    def _load(self) -> dict[tuple[str, str], dict]:
        if self._rows is None:
            self._rows = {}
            try:
                text = self.path.read_text(errors="replace") if self.path.exists() else ""
            except OSError as e:
                self._give_up(e)
                text = ""
            if text:
                for line in text.splitlines():
                    try:  # a run killed mid-write leaves at most one torn last line
                        row = json.loads(line)
                        self._rows[(row["tree"], row["predicate"])] = row
                    except (ValueError, KeyError, TypeError):
                        continue
        return self._rows

    def get(self, tree: str, identity: str) -> Probe | None:
        """The remembered probe for this tree and predicate, or None."""
        if not self.enabled:
            return None
        row = self._load().get((tree, predicate_key(identity)))
        if row is None or row.get("verdict") not in ("good", "bad", "skip"):
            return None
        return Probe(Verdict(row["verdict"]), dict(row.get("values", {})), row.get("reason", ""),
                     float(row.get("seconds", 0.0)), row.get("cause"), output=row.get("output", ""),
                     detail=row.get("detail") or {})

    def put(self, tree: str, commit: str, identity: str, probe: Probe) -> bool:
        """Append one result (if cacheable); returns whether it was written."""
        if not self.enabled or not probe.cacheable:
            return False
        row: dict[str, Any] = {"tree": tree, "predicate": predicate_key(identity), "commit": commit,
               "verdict": probe.verdict, "cause": probe.cause, "values": probe.values, "reason": probe.reason,
               "seconds": round(probe.seconds, 4), "output": probe.output, "detail": probe.detail,
               "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "identity": identity}
        line = json.dumps(row, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One write() on an O_APPEND descriptor: concurrent runs never interleave a line.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as e:  # a read-only .git must not stop the bisect
            self._give_up(e)
            return False
        self._load()[(tree, row["predicate"])] = row
        return True

    def runs(self, identity: str, trees: set[str]) -> list[dict]:
        """Every row recorded under ``identity`` for ``trees``, oldest first (not only the last)."""
        if not self.enabled or not self.path.exists():
            return []
        key, rows = predicate_key(identity), []
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
                if row["predicate"] == key and row["tree"] in trees and \
                        row["verdict"] in ("good", "bad", "skip"):
                    rows.append(row)
            except (ValueError, KeyError, TypeError):
                continue   # a torn last line of a killed run
        return rows

    def _give_up(self, error: OSError) -> None:
        print(f"rlbisect: cache disabled, cannot use {self.path}: {error.strerror}",
              file=sys.stderr)
        self.enabled = False
