"""`rlbisect promote`: turn a replayable step (and a bisect's finding) into a permanent pytest file.

    promote("snapshots/step-000005.pt", "tests/regressions", report="bisect.json")

writes `tests/regressions/test_replay_step_000005.py`, its data `test_replay_step_000005.json` and
`tests/regressions/snapshots/step-000005.pt`, each named after the snapshot file (`step-000005-1.pt`,
a step number saved twice, gives `test_replay_step_000005_1.py` beside it). The test replays the step with whatever trainer code is
importable when pytest runs and asserts the recorded update statistics (bit for bit unless a
tolerance is given) and the post-update parameters; with a bisect report it also asserts that the
invariants which caught the regression pass (:func:`check_replay`, :func:`check_invariants`).

Data stays data: everything read from the snapshot or the report goes into the JSON file, written by
a serializer; the Python file is a fixed text in which only the step number (an integer) and the
snapshot file's name, reduced to letters, digits and underscores, vary, so nothing in a snapshot
can become code. The test finds its files relative to itself.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rlbisect.errors import InputError, RlbisectError, describe
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
    data: Path | None = None   # the recorded statistics the test asserts


def caught_by(report: dict) -> tuple[list[str], str]:
    """The invariants that caught the regression in a bisect report -> (names, how they were found).

    At the first bad commit's probe: the checks its evidence records as failed (the invariants
    predicate's ``evidence.checks``); else the names its ``reason`` lists ("FAILED: name; name"),
    each whole (a substring match took the step-0 "sampler = trainer log-prob" for the run-level
    "sampler = trainer log-prob, every step"); else the invariants whose value there differs from
    their value at every good probe. Failed checks the promoted test cannot run (the run-level
    ones: it runs the step-0 invariants) are refused when they are all that failed: the test
    would pass on the fault.
    """
    from rlbisect.check.invariants import INVARIANTS
    first = report.get("first_bad")
    probes = [p for p in report.get("probes", []) if isinstance(p, dict)]
    bad = next((p for p in probes if p.get("commit") == first and p.get("verdict") == "bad"), None)
    if not first or bad is None:
        raise PromoteError("the bisect report has no first bad commit with a bad probe")
    checks = (bad.get("evidence") or {}).get("checks") if isinstance(bad.get("evidence"), dict) else None
    reason = str(bad.get("reason", ""))
    if isinstance(checks, dict):
        failed = [n for n, c in checks.items() if isinstance(c, dict) and c.get("passed") is False]
        how = "failed at the first bad commit (its probe's evidence)"
    else:
        failed = [n.strip() for n in reason.partition("FAILED:")[2].split(";") if n.strip()] \
            if reason.startswith("FAILED:") else []
        how = "named in the first bad probe's reason"
    if failed:
        usable = [n for n in failed if n in INVARIANTS]
        if not usable:
            raise PromoteError(f"the checks that caught the regression ({'; '.join(failed)}) are not step-0 "
                               "invariants the promoted test can run, so it would pass on the fault; give "
                               "--invariant NAME to assert one that fails there, or promote without --report")
        return usable, how + ("" if usable == failed else
                              f"; not asserted, the test cannot run them: {'; '.join(n for n in failed if n not in usable)}")
    values = {k: v for k, v in (bad.get("values") or {}).items() if k in INVARIANTS}
    goods = [p.get("values") or {} for p in probes if p.get("verdict") == "good"]

    def same(a, b) -> bool:
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and (
            a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(abs(a), abs(b)))
    moved = [n for n, v in values.items() if goods and not any(same(g.get(n), v) for g in goods)]
    return moved, "values that moved between the good probes and the first bad commit"


TEST = '''"""Regression test written by `rlbisect promote`: step {step} must replay as it was recorded.

What the step is, where it was recorded, the statistics its update must reproduce and the invariants
that must pass are in {data} beside this file; the snapshot is in snapshots/. Regenerate with
`rlbisect promote ... --force`.
"""

import json
from pathlib import Path

from rlbisect.steps.promote import check_invariants, check_replay

HERE = Path(__file__).parent
DATA = json.loads((HERE / "{data}").read_text())


def test_replay_{name}():
    check_replay(HERE, DATA)
'''
#: appended when a bisect report named the invariants that caught the regression
TEST_INVARIANTS = '''

def test_invariants_that_caught_the_regression():
    check_invariants(HERE, DATA)
'''


def promoted_data(snap: Snapshot, expected: dict, snapshot_name: str, tolerance: float, source: str,
              invariants: list[str], report_note: str, adapter: str | None, adapter_opts: dict | None,
              folder: Path) -> dict:
    """What the generated test reads: every value from the snapshot and the report, as data. A
    FILE.py adapter is kept relative to the test's folder."""
    if adapter is not None:
        where, _, factory = adapter.rpartition(":")
        if where.endswith(".py"):
            adapter = f"{os.path.relpath(Path(where).resolve(), folder.resolve())}:{factory}"
    code = snap.code
    return {"written": f"{datetime.now(timezone.utc):%Y-%m-%d}", "source": source, "step": snap.step,
            "trainer": snap.config.get("trainer"), "commit": code.commit, "dirty": code.dirty,
            "torch": snap.torch_version, "detectors": [h.detector for h in snap.hits],
            "snapshot": f"snapshots/{snapshot_name}", "tolerance": tolerance, "expected": expected,
            "adapter": adapter, "adapter_opts": adapter_opts or {}, "caught_by": invariants,
            "note": report_note}


def _adapter(here: Path, data: dict, require: tuple[str, ...] = ("replay",)):
    from rlbisect.check.adapter import REQUIRED, load_adapter
    where, _, factory = data["adapter"].rpartition(":")
    spec = f"{here / where}:{factory}" if where.endswith(".py") else data["adapter"]
    return load_adapter(spec, require=require or REQUIRED, **data["adapter_opts"])


def check_replay(here: Path, data: dict) -> None:
    """The promoted test: the step replays, and every recorded statistic comes back."""
    from rlbisect.steps.replay import compare_stats, render_report
    snap = load_snapshot(here / data["snapshot"])
    replayer = _adapter(here, data).replay if data["adapter"] else None
    report = judge(snap, replay_in_process(snap, None, replayer), data["tolerance"])
    assert report.identical, render_report(report)
    replayed = {row.name: row.replayed for row in report.rows}
    moved = [row for row in compare_stats(data["expected"], replayed, data["tolerance"], data["tolerance"])
             if not row.ok]
    assert not moved, moved


def check_invariants(here: Path, data: dict) -> None:
    """The promoted test: the invariants that caught the regression pass."""
    assert data["caught_by"], "the test data names no invariant"
    from rlbisect.check import DEFAULT_ADAPTER, load_adapter, sanity_checks
    # raising: the promoted test shows the exception's own traceback, not a NaN
    results = sanity_checks(_adapter(here, data, ()) if data["adapter"] else load_adapter(DEFAULT_ADAPTER),
                            raising=True)
    # n/a is no pass here either: promote refused to write a test whose invariant could not run
    failing = {name: results[name].value for name in data["caught_by"] if results[name].passed is not True}
    assert not failing, f"invariants failing again: {failing}"


def promote(snapshot: str | os.PathLike, to: str | os.PathLike, report: str | os.PathLike | None = None,
            force: bool = False, tolerance: float = 0.0, invariants: list[str] | None = None,
            adapter: str | None = None, adapter_opts: dict | None = None) -> Promoted:
    """Write the test and a copy of the snapshot into `to`; see the module docstring."""
    src, to = Path(snapshot), Path(to)
    if not to.is_dir() and not to.parent.is_dir():   # create at most the last folder level
        raise PromoteError(f"--to {to}: folder {to.parent} does not exist")
    if to.exists() and not to.is_dir():
        raise PromoteError(f"--to {to}: is a file; give the folder the test goes in")
    snap = load_snapshot(src)  # SnapshotError: refused before anything is written
    if snap.step < 0:       # only a forged file has one; it made a test that does not compile
        raise PromoteError(f"{src}: step {snap.step} is negative: not a step a trainer saved")
    replayer = None
    if adapter is not None:     # the replaying code comes from the command line
        from rlbisect.check.adapter import Offers, load_adapter
        replayer = Offers.of(load_adapter(adapter, require=("replay",), **(adapter_opts or {}))).replay
        if replayer is None:
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
        if invariants:
            if not isinstance(doc.get("first_bad"), str):
                raise PromoteError("the bisect report has no first bad commit with a bad probe")
            notes.append(f"invariants: {', '.join(invariants)} (as given)")
        else:
            found, how = caught_by(doc)
            invariants = found
            notes.append(f"invariants: {', '.join(found) or 'none found'} ({how})")
        note = (f"The bisect in {Path(report).name} found {doc['first_bad'][:12]} as the first bad commit;\n"
                "the invariants that caught it (CAUGHT_BY) must pass too.")
    invariants = list(invariants or [])
    from rlbisect.check.invariants import INVARIANTS
    if unknown := [n for n in invariants if n not in INVARIANTS]:
        raise PromoteError(f"unknown invariant(s) {unknown}; known: {', '.join(INVARIANTS)}")
    if invariants:
        _invariants_hold(invariants, adapter, adapter_opts)
    if snap.config.get("bug"):
        notes.append(f"recorded with fault {snap.config['bug']!r}: the test replays it with that fault")
    # named after the file, not the step number: a loop that counts steps per epoch saves step 1
    # twice (step-000001.pt, step-000001-1.pt), and both must be kept, neither replaced
    name = re.sub(r"[^A-Za-z0-9._-]", "_", src.stem) + ".pt"
    ident = re.sub(r"[^A-Za-z0-9]", "_", src.stem)      # becomes the test's function name: nothing else
    stem = f"test_replay_{ident}"
    test_path, data_path, snap_path = to / f"{stem}.py", to / f"{stem}.json", to / "snapshots" / name
    if not force and (existing := [str(p) for p in (test_path, data_path, snap_path) if p.exists()]):
        raise PromoteError(f"{' and '.join(existing)} already exist(s); use --force to overwrite")
    expected = {r.name: r.recorded for r in verdict.rows}
    data = promoted_data(snap, expected, name, tolerance, src.name, invariants, note, adapter, adapter_opts, to)
    try:
        snap_path.parent.mkdir(parents=True, exist_ok=True)
        _write(snap_path, src.read_bytes())
        load_snapshot(snap_path)  # the copy is what the test will read: it must be intact
        _write(data_path, (json.dumps(data, indent=1) + "\n").encode())
        text = TEST.format(step=snap.step, data=data_path.name, name=ident) + (TEST_INVARIANTS if invariants else "")
        _write(test_path, text.encode())
    except OSError as e:
        raise PromoteError(f"--to {to}: {e.strerror or e}") from None
    return Promoted(test_path, snap_path, invariants, notes, data_path)


def _invariants_hold(names: list[str], adapter: str | None, opts: dict | None) -> None:
    """The invariants the test will assert, run now: a test that cannot run them, or that fails
    where it is written, would be noise."""
    from rlbisect.check import DEFAULT_ADAPTER, load_adapter, sanity_checks
    from rlbisect.check.adapter import REQUIRED
    try:
        checked = load_adapter(adapter, require=REQUIRED, **(opts or {})) if adapter else load_adapter(DEFAULT_ADAPTER)
        results = sanity_checks(checked, only=names)
    except Exception as e:  # noqa: BLE001 - whatever stops them, the test would stop on it too
        raise PromoteError(f"the invariants {', '.join(names)} cannot run here: {describe(e)}") from None
    if failing := [n for n in names if results[n].passed is not True]:
        raise NotReplayable("the invariants do not pass on the current code: " + "; ".join(
            f"{n} ({results[n].na})" if results[n].na else f"{n} = {results[n].value:.3g}" for n in failing))


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")  # never a half-written file under the final name
    tmp.write_bytes(data)
    os.replace(tmp, path)
