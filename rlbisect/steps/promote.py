"""`rlbisect promote`: turn a replayable step (and a bisect's finding) into a permanent pytest file.

    promote("snapshots/step-000005.pt", "tests/regressions", report="bisect.json")

writes `tests/regressions/test_replay_step_000005.py` and `tests/regressions/snapshots/step-000005.pt`.
The test replays the step with whatever trainer code is importable when pytest runs and asserts the
recorded update statistics (bit for bit unless a tolerance is given) and the post-update parameters;
with a bisect report it also asserts that the invariants which caught the regression pass.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rlbisect.errors import InputError, RlbisectError
from rlbisect.steps.replay import REPLAYERS, ReplayError, UpdateRaised, judge, replay_in_process
from rlbisect.steps.format import Snapshot, load_snapshot


class PromoteError(InputError):
    """Cannot write the test (bad input, a file in the way): exit 2."""


class NotReplayable(RlbisectError):
    """The step does not replay on the current code, so a test of it would fail at once: exit 1."""


@dataclass
class Promoted:
    test: Path
    snapshot: Path
    invariants: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def caught_by(report: dict) -> tuple[list[str], str]:
    """The invariants that caught the regression in a bisect report -> (names, how they were found).

    At the first bad commit's probe: the registered invariant names its `reason` quotes (the
    invariants predicate writes "FAILED: name; name"); else the invariants whose value there
    differs from their value at every good probe.
    """
    from rlbisect.check.invariants import INVARIANTS
    first = report.get("first_bad")
    probes = [p for p in report.get("probes", []) if isinstance(p, dict)]
    bad = next((p for p in probes if p.get("commit") == first and p.get("verdict") == "bad"), None)
    if not first or bad is None:
        raise PromoteError("the bisect report has no first bad commit with a bad probe")
    quoted = [n for n in INVARIANTS if n in str(bad.get("reason", ""))]
    if quoted:
        return quoted, "named in the first bad probe's reason"
    values = {k: v for k, v in (bad.get("values") or {}).items() if k in INVARIANTS}
    goods = [p.get("values") or {} for p in probes if p.get("verdict") == "good"]

    def same(a, b) -> bool:
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and (
            a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(abs(a), abs(b)))
    moved = [n for n, v in values.items() if goods and not any(same(g.get(n), v) for g in goods)]
    return moved, "values that moved between the good probes and the first bad commit"


def _literal(v) -> str:
    """A Python literal for a JSON value (double-quoted strings; floats repr round-trip exactly)."""
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    return json.dumps(v) if isinstance(v, str) else repr(v)


def render_test(snap: Snapshot, expected: dict, snapshot_name: str, tolerance: float, source: str,
                invariants: list[str], report_note: str, adapter: str | None = None,
                adapter_opts: dict | None = None) -> str:
    """The generated pytest module."""
    name = Path(snapshot_name).stem.replace("-", "_")
    code = snap.code
    at = "an unknown commit" if code.commit is None else code.commit[:12] + (" (dirty)" if code.dirty else "")
    fired = "; detectors fired: " + ", ".join(h.detector for h in snap.hits) if snap.hits else ""
    how = "bit for bit" if tolerance == 0 else "within TOLERANCE * (1 + |recorded|)"
    lines = [f'"""Regression test written by `rlbisect promote` on {datetime.now(timezone.utc):%Y-%m-%d}.',
             "",
             f"Step {snap.step} of a {snap.config.get('trainer')} run recorded at {at}, torch "
             f"{snap.torch_version}{fired}.",
             f"Replaying its saved update must reproduce the statistics in EXPECTED {how}, and the",
             "parameters after the update. A failure prints recorded vs replayed for every statistic.",
             *([""] + [report_note] if report_note else []),
             "",
             f"Source: {source}. Regenerate with `rlbisect promote ... --force`.",
             '"""', "", "from pathlib import Path", "",
             "from rlbisect.steps.replay import compare_stats, judge, render_report, replay_in_process",
             "from rlbisect.steps.format import load_snapshot", "",
             f'SNAPSHOT = Path(__file__).parent / "snapshots" / {_literal(snapshot_name)}',
             f"TOLERANCE = {tolerance!r}",
             # the replaying code the promote command line named (never one read from the snapshot)
             *([f"ADAPTER = {_literal(adapter)}", f"ADAPTER_OPTS = {adapter_opts or {}!r}"] if adapter else []),
             "EXPECTED = {"]
    lines += [f"    {_literal(k)}: {_literal(v)}," for k, v in expected.items()]
    lines += ["}"]
    if invariants:
        lines += ["CAUGHT_BY = [", *[f"    {_literal(n)}," for n in invariants], "]"]
    lines += ["", "", f"def test_replay_{name}():",
              "    snap = load_snapshot(SNAPSHOT)",
              *(["    from rlbisect.check import load_adapter",
                 "    replayer = load_adapter(ADAPTER, **ADAPTER_OPTS).replay",
                 "    report = judge(snap, replay_in_process(snap, None, replayer), TOLERANCE)"] if adapter else
                ["    report = judge(snap, replay_in_process(snap), TOLERANCE)"]),
              "    assert report.identical, render_report(report)",
              "    replayed = {row.name: row.replayed for row in report.rows}",
              "    moved = [row for row in compare_stats(EXPECTED, replayed, TOLERANCE, TOLERANCE) if not row.ok]",
              "    assert not moved, moved"]
    if invariants:
        lines += ["", "", "def test_invariants_that_caught_the_regression():",
                  "    from rlbisect.check import DEFAULT_ADAPTER, load_adapter, sanity_checks",
                  "    results = sanity_checks(load_adapter(" + ("ADAPTER, **ADAPTER_OPTS))" if adapter
                                                                 else "DEFAULT_ADAPTER))"),
                  "    failing = {name: results[name].value for name in CAUGHT_BY if not results[name].passed}",
                  '    assert not failing, f"invariants failing again: {failing}"']
    return "\n".join(lines) + "\n"


def promote(snapshot: str | os.PathLike, to: str | os.PathLike, report: str | os.PathLike | None = None,
            force: bool = False, tolerance: float = 0.0, invariants: list[str] | None = None,
            adapter: str | None = None, adapter_opts: dict | None = None) -> Promoted:
    """Write the test and a copy of the snapshot into `to`; see the module docstring."""
    src, to = Path(snapshot), Path(to)
    if not to.is_dir() and not to.parent.is_dir():   # create at most the last folder level
        raise PromoteError(f"--to {to}: folder {to.parent} does not exist")
    snap = load_snapshot(src)  # SnapshotError: refused before anything is written
    replayer = None
    if adapter is not None:     # the replaying code comes from the command line
        from rlbisect.check.adapter import load_adapter
        replayer = getattr(load_adapter(adapter, **(adapter_opts or {})), "replay", None)
        if not callable(replayer):
            raise PromoteError(f"{adapter} returned an adapter without replay(snap, bug)")
    elif snap.config.get("trainer") not in REPLAYERS:
        raise PromoteError(f"snapshot names trainer {snap.config.get('trainer')!r}; promote needs one of "
                           f"{', '.join(REPLAYERS)}, or --adapter MODULE:FACTORY")
    try:  # a test that fails where it is written would be noise: check it replays now
        verdict = judge(snap, replay_in_process(snap, None, replayer), tolerance)
    except UpdateRaised as e:
        raise NotReplayable(f"the update raises on the current code: {e}") from None
    except ReplayError as e:
        raise PromoteError(str(e)) from None
    if not verdict.identical:
        raise NotReplayable(f"step {snap.step} does not replay on the current code "
                            f"(moved: {', '.join(verdict.moved) or 'parameters'}); see `rlbisect replay {src}`")
    notes, note = [], ""
    if report is not None:
        try:
            doc = json.loads(Path(report).read_text())
        except (OSError, ValueError) as e:
            raise PromoteError(f"--report {report}: {e}".splitlines()[0]) from None
        if not isinstance(doc, dict):
            raise PromoteError(f"--report {report}: not a bisect report (a JSON object)")
        found, how = caught_by(doc)
        if invariants:
            notes.append(f"invariants: {', '.join(invariants)} (as given)")
        else:
            invariants = found
            notes.append(f"invariants: {', '.join(found) or 'none found'} ({how})")
        note = (f"The bisect in {Path(report).name} found {doc['first_bad'][:12]} as the first bad commit;\n"
                "the invariants that caught it (CAUGHT_BY) must pass too.")
    invariants = list(invariants or [])
    from rlbisect.check.invariants import INVARIANTS
    if unknown := [n for n in invariants if n not in INVARIANTS]:
        raise PromoteError(f"unknown invariant(s) {unknown}; known: {', '.join(INVARIANTS)}")
    if snap.config.get("bug"):
        notes.append(f"recorded with fault {snap.config['bug']!r}: the test replays it with that fault")
    name = f"step-{snap.step:06d}.pt"
    test_path, snap_path = to / f"test_replay_{name[:-3].replace('-', '_')}.py", to / "snapshots" / name
    if not force and (existing := [str(p) for p in (test_path, snap_path) if p.exists()]):
        raise PromoteError(f"{' and '.join(existing)} already exist(s); use --force to overwrite")
    expected = {r.name: r.recorded for r in verdict.rows}
    text = render_test(snap, expected, name, tolerance, src.name, invariants, note, adapter, adapter_opts)
    snap_path.parent.mkdir(parents=True, exist_ok=True)
    _write(snap_path, src.read_bytes())
    load_snapshot(snap_path)  # the copy is what the test will read: it must be intact
    _write(test_path, text.encode())
    return Promoted(test_path, snap_path, invariants, notes)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")  # never a half-written file under the final name
    tmp.write_bytes(data)
    os.replace(tmp, path)
