"""The ``replay:STEP.pt`` predicate: does the saved step still replay on this commit's code?

Good when every statistic and the updated parameters match the recording bit for bit (or within
``tolerance``), bad when anything moved or the update raised, skip when the step cannot run at that
commit. The snapshot is checked once, when the predicate is built: a broken file is bad input
(exit 2), never a verdict about the code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pydantic import Field

from rlbisect._proc.editable import own_imports
from rlbisect.bisect.predicates import PREDICATES, BasePredicate, Kind, Options, PredicateError, Probe
from rlbisect.git.repo import probe_env


class ReplayOptions(Options):
    """Options of ``--predicate replay:STEP.pt``."""

    tolerance: float = Field(0.0, ge=0, description="allowed |diff| per statistic: X * (1 + |recorded|); "
                             "0 = bit-exact")


class ReplayPredicate(BasePredicate):
    def __init__(self, path: str | None, options: ReplayOptions = ReplayOptions()):
        from rlbisect.steps.format import SnapshotError, load_snapshot
        if not path:
            raise PredicateError("replay needs a snapshot: --predicate replay:path/to/step-000005.pt")
        self.path = Path(path).expanduser().resolve()   # probes run in other directories
        try:
            load_snapshot(self.path)
        except SnapshotError as e:
            raise PredicateError(f"replay: {e}") from None
        self.options = options
        self.imports: tuple[str, ...] = ()   # your editable install's folders: preflight finds them

    def identity(self) -> str:
        from rlbisect.steps.at import replay_identity
        key = replay_identity(self.path, None, self.options.tolerance)
        return json.dumps({**json.loads(key), "imports": list(self.imports)}, sort_keys=True) if self.imports else key

    def preflight(self, repo, commit: str) -> None:
        self.imports = own_imports(repo.root, [sys.executable], probe_env())

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        from rlbisect.steps.at import replay_at
        t0 = time.perf_counter()
        verdict, cause, values, reason = replay_at(self.path, worktree, timeout, None,
                                                   self.options.tolerance, self.imports)
        return Probe(verdict, values, reason, time.perf_counter() - t0, cause)


PREDICATES.register("replay", Kind(
    lambda spec: ReplayPredicate(spec.arg, spec.options), ReplayOptions,
    "replay:STEP.pt - the saved step must replay identically on the commit's code", "arg"))
