"""The `replay:STEP.pt` bisect predicate: does the saved step still replay on this commit's code?

Good when every statistic and the updated parameters match the recording bit for bit (or within
`tolerance`), bad when anything moved or the update raised, skip when the step cannot run at that
commit. The snapshot is checked once, when the bisect starts: a broken file is bad input (exit 2),
never a verdict about the code.
"""

from __future__ import annotations

from pathlib import Path

from rlbisect.bisect.predicates import PredicateError, PredicateSpec, Probe, register_predicate


class ReplayPredicate:
    def __init__(self, path: str, bug: str | None = None, tolerance: float = 0.0):
        from rlbisect.snapshot import SnapshotError, load_snapshot
        self.path = Path(path).expanduser().resolve()   # probes run in other directories
        try:
            load_snapshot(self.path)
        except SnapshotError as e:
            raise PredicateError(f"replay: {e}") from None
        self.bug, self.tolerance = bug, tolerance

    def identity(self) -> str:
        from rlbisect.replay_at import replay_identity
        return replay_identity(self.path, self.bug, self.tolerance)

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        import time

        from rlbisect.replay_at import replay_at
        t0 = time.perf_counter()
        verdict, values, reason = replay_at(self.path, worktree, timeout, self.bug, self.tolerance)
        interrupted = reason.endswith("interrupted") or "timed out" in reason
        return Probe(verdict, values, reason, time.perf_counter() - t0, cacheable=not interrupted)


def _factory(spec: PredicateSpec) -> ReplayPredicate:
    if not spec.arg:
        raise PredicateError("replay needs a snapshot: --predicate replay:path/to/step-000005.pt")
    if spec.command:
        raise PredicateError("the replay predicate takes no command")
    unknown = set(spec.options) - {"tolerance"}
    if unknown:
        raise PredicateError(f"the replay predicate takes no option {sorted(unknown)[0]!r}")
    try:
        tolerance = float(spec.options.get("tolerance", 0.0))
    except ValueError:
        raise PredicateError("replay: tolerance must be a number") from None
    return ReplayPredicate(spec.arg, tolerance=tolerance)


register_predicate("replay", _factory, "replay:STEP.pt - the saved step must replay identically on the commit's code")
