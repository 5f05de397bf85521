"""Putting a snapshot back into live objects, replaying its update, and judging the result.

The generic half of `rlbisect replay`: compare recorded and replayed statistics (the state goes back
through :mod:`.restore`), judge the parameters, render the verdict. Re-running a trainer's update is the
trainer's glue, registered in :data:`REPLAYERS` by the trainer name a snapshot records (see
:mod:`rlbisect.registry`), e.g. ``rlbisect.tinyagent.replay`` for TinyAgent's:

    snap = load_snapshot("snapshots/step-000005.pt")
    report = judge(snap, replay_in_process(snap))      # runs the update with the installed code
    print(render_report(report)); raise SystemExit(report.exit_code)

A replayer takes `(snap, bug)` and returns a `Replayed`; it raises `ReplayError` when it cannot
run at all (exit 2) and `UpdateRaised` when the trainer's own update raised (a difference: exit 1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import torch

from rlbisect.errors import InputError, describe, printable
from rlbisect.metrics import is_timing
from rlbisect.steps.capture import plain_stats
from rlbisect.registry import Registry
from rlbisect.steps.format import Snapshot
from rlbisect.steps.restore import (restore, restore_model, restore_optimizer,  # noqa: F401 (the replayers' API)
                                    restore_rng, restore_scheduler)

#: trainer name (a snapshot's ``config["trainer"]``) -> ``fn(snap, bug) -> Replayed``. A name read
#: from a snapshot only selects one of these: no import path is ever read out of a snapshot.
REPLAYERS: Registry[Callable[[Snapshot, "str | None"], "Replayed"]] = Registry("replayer")
REPLAYERS.register("reference_trainer", "rlbisect.tinyagent.replay:replay_reference")
REPLAYERS.register("verl", "rlbisect.frameworks.verl.snapshot:replay")


class ReplayError(InputError):
    """The replay cannot run (unknown trainer, missing code, state that does not fit): exit 2."""


class UpdateRaised(Exception):
    """The trainer's update raised while replaying: the step no longer replays (exit 1)."""


# --- compare ----------------------------------------------------------------------------------------

class StatRow(NamedTuple):
    name: str
    recorded: Any
    replayed: Any
    abs_diff: float | None
    ok: bool


def _same(a: Any, b: Any, rtol: float, atol: float) -> tuple[float | None, bool]:
    num = (int, float)
    if not (isinstance(a, num) and isinstance(b, num)) or isinstance(a, bool) or isinstance(b, bool):
        return None, a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return (0.0, True) if math.isnan(a) and math.isnan(b) else (math.nan, False)
    if a == b:  # also covers equal infinities; -0.0 vs 0.0 differ in bits, so check the sign
        return 0.0, rtol > 0 or atol > 0 or math.copysign(1, a) == math.copysign(1, b)
    diff = abs(a - b)
    return diff, diff <= atol + rtol * abs(a)


def compare_stats(recorded: dict, replayed: dict, rtol: float = 0.0, atol: float = 0.0) -> list[StatRow]:
    """One row per statistic (timing keys excluded); exact by default. A missing side is not ok."""
    rows = []
    for name in [*recorded, *(k for k in replayed if k not in recorded)]:
        if is_timing(name):
            continue
        if name not in recorded or name not in replayed:
            rows.append(StatRow(name, recorded.get(name), replayed.get(name), None, False))
            continue
        diff, ok = _same(recorded[name], replayed[name], rtol, atol)
        rows.append(StatRow(name, recorded[name], replayed[name], diff, ok))
    return rows


def relative_diff(row: StatRow) -> float:
    """|recorded - replayed| / max(|recorded|, |replayed|): the scale-free size of a move (inf if unknown)."""
    if row.abs_diff is None or math.isnan(row.abs_diff):
        return 0.0 if row.ok else math.inf
    scale = max(abs(float(row.recorded)), abs(float(row.replayed)))
    return 0.0 if row.abs_diff == 0 else (row.abs_diff / scale if scale else math.inf)


# --- replay and judge ---------------------------------------------------------------------------------

@dataclass
class Replayed:
    """What a trainer's replayer measured after re-running the saved update."""

    stats: dict[str, Any]                  # exactly what the update returned
    post_update_sha256: str
    update_norm: float | None = None       # ||params after - params before||
    update_diff_norm: float | None = None  # ||replayed after - recorded after|| (needs snap.post_update)
    notes: list[str] = field(default_factory=list)
    post_optimizer_sha256: str | None = None   # capture.optimizer_digest after the update


def replay_in_process(snap: Snapshot, bug: str | None = None, replayer=None) -> Replayed:
    """Re-run the snapshot's update with the trainer code importable here. `bug`: replayer-specific
    override of the recorded fault switch ("none" for no fault), None keeps the recorded one.
    `replayer`: a `(snap, bug) -> Replayed` the caller chose (``replay --adapter``); else the
    registered one for the snapshot's trainer name."""
    if replayer is None:
        trainer = snap.config.get("trainer")
        if not isinstance(trainer, str) or trainer not in REPLAYERS:
            what = f"trainer {trainer!r}" if trainer else "no trainer (config has no 'trainer' key)"
            raise ReplayError(f"snapshot names {what}; rlbisect replays {', '.join(REPLAYERS)} snapshots by "
                              "itself: replay others with --adapter MODULE:FACTORY (an adapter with replay())")
        replayer = REPLAYERS.get(trainer)
    try:
        replayed = replayer(snap, bug)
    except (ReplayError, UpdateRaised):
        raise
    except Exception as e:  # noqa: BLE001 - a replayer outside the contract: no verdict on the step
        raise ReplayError(f"the replayer raised {printable(describe(e))} (a replayer raises UpdateRaised "
                          "where the update itself fails, ReplayError where the state does not fit)") from None
    if not isinstance(replayed, Replayed):   # None is not "the update raised": no verdict on the step
        raise ReplayError(f"the replayer returned {type(replayed).__name__}, not a Replayed (the update's "
                          "stats and digests; UpdateRaised where the update itself fails)")
    if snap.rng.cuda and not torch.cuda.is_available():
        replayed.notes.append(f"the step ran with {len(snap.rng.cuda)} CUDA device(s)' generators in use and this "
                              "machine has no CUDA: they were not restored, so what drew from them does not repeat")
    if torch.get_num_threads() != snap.num_threads:
        replayed.notes.append(f"recorded with {snap.num_threads} threads, replayed with "
                              f"{torch.get_num_threads()}: sums split differently can move the last bits")
    return replayed


@dataclass
class ReplayReport:
    step: int
    identical: bool
    rows: list[StatRow]        # compared statistics, moved ones first (biggest relative move first)
    not_replayed: list[str]    # recorded keys the update does not produce (rollout side, evaluation)
    not_recorded: list[str]    # keys only the replay produced (a statistic added since): not compared
    params: dict[str, Any]
    notes: list[str]
    error: str | None = None   # the update raised this
    tolerance: float = 0.0
    recorded_error: str | None = None   # the recorded step raised this (a step saved by step_failed)

    @property
    def exit_code(self) -> int:
        return 0 if self.identical else 1

    @property
    def moved(self) -> list[str]:
        return [r.name for r in self.rows if not r.ok]


def judge(snap: Snapshot, replayed: Replayed | None, tolerance: float = 0.0, error: str | None = None,
          notes: Sequence[str] = ()) -> ReplayReport:
    """Compare a replay with the recording. tolerance 0: bit-exact statistics and parameters;
    X > 0: each statistic within X * (1 + |recorded|), the update within X * (1 + ||update||)."""
    hit = next((h for h in snap.hits if h.detector == "raised"), None)
    raised, said = (None, None) if hit is None else (hit.signal, hit.message.removeprefix("the step raised "))
    if replayed is None:  # the update raised: the same as recorded only with the recorded error's first line
        error = error or "the update raised"
        same = said is not None and error.splitlines()[0][:300] == said
        if hit is not None and not same and error.split(":", 1)[0] == raised:
            notes = [*notes, f"the recorded step raised {said}: the same type, another error"]
        return ReplayReport(snap.step, same, [], [], [], {}, list(notes), error, tolerance, raised)
    # It raised when recorded, and this replay completed: the same update only if it leaves the
    # weights the recorded step left (the error came after it, in an evaluation), else a fix.
    if raised is not None and snap.post_update_sha256 != replayed.post_update_sha256:
        return ReplayReport(snap.step, False, [], [], [], {}, [*notes, *replayed.notes], None, tolerance, raised)
    if raised is not None:
        notes = [*notes, f"the recorded step raised {raised} after its update, which replays as it ran"]
    # Only statistics on both sides count: a key a later commit adds or drops is listed, not a
    # difference. Replayed values are read as the hook read the recorded ones (0-dim tensors too).
    stats = plain_stats(replayed.stats)
    common = [k for k in snap.stats if k in stats]
    rows = compare_stats({k: snap.stats[k] for k in common}, {k: stats[k] for k in common},
                         rtol=tolerance, atol=tolerance)
    rows.sort(key=lambda r: (r.ok, -relative_diff(r)))  # stable: unmoved rows keep recorded order
    not_replayed = [k for k in snap.stats if k not in stats and not is_timing(k) and k != "step"]
    not_recorded = [k for k in stats if k not in snap.stats and not is_timing(k)]
    rec_norm, rep_norm, dn = snap.update_norm, replayed.update_norm, replayed.update_diff_norm
    equal = None if snap.post_update_sha256 is None else snap.post_update_sha256 == replayed.post_update_sha256
    unmeasured = tolerance > 0 and equal is False and dn is None
    if tolerance == 0 or equal or unmeasured:
        params_ok = equal is not False
    else:   # the distance between the two updates: two of one size in opposite directions differ
        params_ok = dn is not None and dn <= tolerance * (1 + (rec_norm or 0.0))
    # the optimizer's moments and step counts: a fault can damage them and leave the weights alone
    rec_opt, rep_opt = snap.post_optimizer_sha256, replayed.post_optimizer_sha256
    optim_equal = None if rec_opt is None or rep_opt is None else rec_opt == rep_opt
    ok = params_ok and (optim_equal is not False or tolerance > 0)
    params = {"recorded_sha256": snap.post_update_sha256, "replayed_sha256": replayed.post_update_sha256,
              "digest_equal": equal, "recorded_update_norm": rec_norm, "replayed_update_norm": rep_norm,
              "update_diff_norm": dn, "weights_ok": params_ok, "optimizer_equal": optim_equal,
              "ok": ok}
    all_notes = [*notes, *replayed.notes] + [
        f"the frozen module {n!r} changed during the recorded step and was saved as it was after it: "
        "the replay reads another one than the update did, so it cannot match" for n in snap.meta.get("frozen_changed", [])]
    if unmeasured:
        all_notes.append("the parameters differ in bits and how far cannot be measured (the snapshot keeps no "
                         "post-update weights, or the replayer gives no update_diff_norm): not within a "
                         "tolerance on that evidence; save with keep_post_update=True")
    if equal is None:
        if not rows:
            raise ReplayError("nothing to compare: no recorded statistic is produced by the update, "
                              "and the snapshot records no post-update digest")
        all_notes.append("the snapshot records no post-update digest: parameters not checked")
    if optim_equal is False and tolerance > 0:
        all_notes.append("the optimizer's state after the step differs in bits: not measured, so not "
                         "judged under a tolerance")
    elif optim_equal is None and rec_opt is not None:
        all_notes.append("the replayer gives no post_optimizer_sha256: the optimizer's state after the step "
                         "is not compared")
    return ReplayReport(snap.step, all(r.ok for r in rows) and ok, rows, not_replayed, not_recorded,
                        params, all_notes, None, tolerance)


def report_json(report: ReplayReport) -> dict[str, Any]:
    out = asdict(report)
    out["rows"] = [dict(r._asdict(), rel_diff=relative_diff(r)) for r in report.rows]
    return dict(out, moved=report.moved, exit_code=report.exit_code)


def _num(v: Any) -> str:
    return f"{v:.10g}" if isinstance(v, float) else "-" if v is None else repr(v)


def render_report(report: ReplayReport) -> str:
    """Recorded vs replayed, moved statistics first, then parameters, then the verdict line (the
    names came from a file: terminal escapes are shown, never sent)."""
    return printable(_render(report))


def _render(report: ReplayReport) -> str:
    lines = [f"replay of step {report.step}"]
    lines += [f"note: {n}" for n in report.notes]
    if report.error is not None:
        return "\n".join([*lines, f"IDENTICAL: the update raises, as the recorded step did: {report.error}"
                           if report.identical else f"DIFFERS: the update raised: {report.error}"])
    if report.recorded_error is not None:
        return "\n".join([*lines, f"DIFFERS: the recorded step raised {report.recorded_error}; the replay completed"])
    lines.append(f"  {'statistic':<16} {'recorded':>18} {'replayed':>18} {'|diff|':>10} {'rel':>9}")
    for r in report.rows:
        diff = "-" if r.abs_diff is None else f"{r.abs_diff:.3g}"
        rel = relative_diff(r)
        lines.append(f"{'  ' if r.ok else '* '}{r.name:<16} {_num(r.recorded):>18} {_num(r.replayed):>18} "
                     f"{diff:>10} {'-' if math.isinf(rel) else f'{rel:.2e}':>9}")
    p = report.params
    same = {True: "identical", False: "DIFFERENT", None: "not recorded"}[p["digest_equal"]]
    lines.append(f"parameters: post-update sha256 {same}"
                 + (f"; update norm recorded {_num(p['recorded_update_norm'])}, "
                    f"replayed {_num(p['replayed_update_norm'])}" if p["replayed_update_norm"] is not None else "")
                 + (f"; ||replayed - recorded update|| = {p['update_diff_norm']:.3g}"
                    if p["update_diff_norm"] is not None else ""))
    if p["optimizer_equal"] is not None:
        lines.append(f"optimizer state after the step: {'identical' if p['optimizer_equal'] else 'DIFFERENT'}")
    if report.not_replayed:
        lines.append("not replayed (rollout side or evaluation, not recomputed by the update): "
                     + ", ".join(report.not_replayed))
    if report.not_recorded:
        lines.append("not recorded (only the replay produces them; not compared): " + ", ".join(report.not_recorded))
    if report.identical:
        how = "bit for bit" if report.tolerance == 0 else f"within tolerance {report.tolerance:g}"
        lines.append(f"IDENTICAL: {len(report.rows)} statistics and the parameters match {how}")
    else:
        moved = [f"{r.name} ({'changed' if r.abs_diff is None else f'{relative_diff(r):.2g} rel'})"
                 for r in report.rows if not r.ok]
        lines.append(f"DIFFERS: {len(moved)} of {len(report.rows)} statistics moved"
                     + (" (biggest first): " + ", ".join(moved) if moved else "")
                     + ("" if p["weights_ok"] else "; parameters differ")
                     + ("" if p["ok"] or not p["weights_ok"] else "; the optimizer's state after the step differs"))
    return "\n".join(lines)
