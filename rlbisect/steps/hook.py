"""The snapshot hook: a few lines in any PyTorch training loop make its spikes replayable.

    hook = SnapshotHook("snapshots", every=None, config=cfg)      # detector hits only
    for step in range(steps):
        batch = collect(...)                                      # dict[str, Tensor]
        hook.before_update(step, model, optimizer, batch, generators={"minibatch": gen})
        stats = update(model, optimizer, batch, gen)              # dict of floats, metrics.py names
        hits = hook.after_update(step, stats)                     # saved step-NNNNNN.pt if any hit

`before_update` clones the pre-update state in memory (model and optimizer tensors, the batch, RNG
states): no disk I/O and no device sync, so an armed hook costs a few memory copies per step.
`after_update` feeds the detectors and writes a file only when one fires or `step % every == 0`;
a step that raises instead (`step_failed`, automatic with `with hook.update(...)`) is saved too,
with the error as its hit, before the exception goes on.

Modules the update reads but never changes (a frozen KL reference) go in `frozen={"ref": ref}`:
they are written only when a snapshot is saved, and a replay then uses exactly the reference the
run used. Each step the hook fingerprints them (a strided sample of each tensor) and tells its
detectors `frozen_moved` = 1 when one changed since the step before. Such a module may change again
after this update and before `after_update` (a loop that reloads the reference from the policy), so
from then on it is cloned in `before_update`, as read; one that changed within a step before it was
seen moving is saved as it was after the step, and the snapshot says so (`meta["frozen_changed"]`).

`SnapshotHook(None)` only watches: detectors and fingerprints, nothing copied or saved.

Disk bound (only files this hook wrote are ever deleted):
* periodic snapshots (no hit) rotate: only the newest `keep_last` survive;
* at most `max_snapshots` files in total; past that the oldest periodic one goes first, then the
  oldest detector-hit one. Detectors are edge-triggered, so hits are rare and this seldom bites.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlbisect.git.repo import CodeIdentity, code_identity
from rlbisect.steps.capture import capture, diff_norm, fingerprint, optimizer_digest, plain_stats, state_digest
from rlbisect.steps.format import RngState, Snapshot, save_snapshot
from rlbisect.steps.spikes import DetectorSet, Hit, SpikeConfig, default_detectors


def snapshot_name(step: int) -> str:
    return f"step-{step:06d}.pt"


def _find_code(model: torch.nn.Module) -> CodeIdentity:
    """The git identity of the file defining the model's class, else of the current directory."""
    try:
        found = code_identity(Path(inspect.getfile(type(model))).parent)
    except (TypeError, OSError):
        found = CodeIdentity()
    return found if found.commit is not None else code_identity()


class StepRecord:
    """Handed out by `SnapshotHook.update`; call `log(stats)` inside the block."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.stats: dict[str, Any] | None = None
        self.hits: list[Hit] = []

    def log(self, stats: Mapping[str, Any]) -> None:
        self.stats = dict(stats)


class SnapshotHook:
    """Keeps each step's pre-update state in memory and persists it when a detector fires.

    directory      where `step-NNNNNN.pt` files go (created if missing); None: watch only
    every          also save every `every`-th step (`step % every == 0`); None: detector hits only
    detectors      a `DetectorSet`, a `SpikeConfig`, or None for `default_detectors()`
    keep_last      periodic snapshots kept (newest first)
    max_snapshots  total files this hook keeps on disk
    config         the run's config (a JSON-able dict, or a pydantic model), stored in each file
    meta           free-form JSON-able dict stored in each file
    code_dir       a path inside the git repo of the training code (default: the repo holding the
                   model's class, else the current directory); read once, at the first step
    keep_post_update  also store the model after the update (doubles the model's share of the
                   file), so a replay reports how far its update lands from the recorded one
    """

    def __init__(self, directory: str | os.PathLike | None, *, every: int | None = None,
                 detectors: DetectorSet | SpikeConfig | None = None, keep_last: int = 3,
                 max_snapshots: int = 20, config: Any = None, meta: dict | None = None,
                 code_dir: str | os.PathLike | None = None, keep_post_update: bool = False) -> None:
        if every is not None and every < 1:
            raise ValueError("every must be >= 1 (or None for detector hits only)")
        if keep_last < 1 or max_snapshots < 1:
            raise ValueError("keep_last and max_snapshots must be >= 1")
        if directory is None and every is not None:
            raise ValueError("every needs a directory to save to")
        self.dir = None if directory is None else Path(directory)
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.every, self.keep_last, self.max_snapshots = every, keep_last, max_snapshots
        self.keep_post_update = keep_post_update
        self.detectors = detectors if isinstance(detectors, DetectorSet) else default_detectors(detectors)
        if hasattr(config, "model_dump"):
            config = config.model_dump(mode="json")
        self.config: dict = dict(config or {})
        self.meta: dict = dict(meta or {})
        json.dumps([self.config, self.meta])  # fail now, not at the first spike hours later
        self.code: CodeIdentity | None = None if code_dir is None else code_identity(code_dir)
        self.hits: list[Hit] = []  # every hit of the run, saved or not
        self.saved: list[Path] = []  # files written, oldest first (deleted ones included)
        self.errors: list[str] = []  # save failures; a debugging aid never stops the run
        self._periodic: list[Path] = []
        self._flagged: list[Path] = []
        self._pending: tuple[int, Snapshot | None, torch.nn.Module, dict[str, torch.nn.Module],
                             torch.optim.Optimizer | None] | None = None
        self._prints: dict[str, list[float]] = {}   # the frozen modules' fingerprints, last step
        self._moved: float | None = None

    def before_update(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                      batch: Mapping[str, Any],
                      generators: dict[str, torch.Generator] | None = None,
                      frozen: Mapping[str, torch.nn.Module | None] | None = None,
                      keep_grads: bool = True, scheduler: Any = None, rng: RngState | None = None) -> None:
        """Clone what the update is about to consume. Call right before the update's first RNG use.

        `frozen` modules are only referenced here (the update must not change them); a frozen
        module that *is* the model is skipped: its pre-update state is the model's. The gradients
        the parameters hold are kept too (a loop that does not clear them adds them into the
        update); `keep_grads=False` where this is called after the update's own backward. Pass the
        learning-rate `scheduler` when the update steps it (between minibatches), so a replay can too.
        A loop that can call this only after the update's forward passes (a callback before the
        optimizer step) passes the `rng` it took (`capture_rng()`) before them: dropout drew from it.
        """
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.code is None:  # once: the code as loaded when the run began, before anyone edits it
            self.code = _find_code(model)
        kept = {n: m for n, m in (frozen or {}).items() if m is not None and m is not model}
        prints = {n: fingerprint(m) for n, m in kept.items()}
        both = prints.keys() & self._prints.keys()
        moving = [n for n in both if prints[n] != self._prints[n]]
        self._moved = float(bool(moving)) if both else None
        self._prints = prints
        snap = None if self.dir is None else capture(step, model, optimizer, dict(batch), generators, keep_grads,
                                                     scheduler, rng, config=self.config, meta=self.meta, code=self.code)
        if snap is not None:   # a module seen moving may move again before the save: keep it as read now
            snap.frozen = {n: {k: t.detach().clone() for k, t in kept[n].state_dict().items()} for n in moving}
        self._pending = (step, snap, model, kept, optimizer)

    def after_update(self, step: int, stats: Mapping[str, Any]) -> list[Hit]:
        """Feed the step's logged statistics to the detectors; save the kept state if needed."""
        if self._pending is None or self._pending[0] != step:
            kept = None if self._pending is None else self._pending[0]
            raise RuntimeError(f"after_update({step}) without a matching before_update (kept: {kept})")
        _, snap, model, frozen, optimizer = self._pending
        self._pending = None
        logged = plain_stats(stats)
        # the detectors also see the hook's own observation; the snapshot keeps only what the update
        # logged, which is what a replay recomputes and compares
        seen = logged if self._moved is None else {**logged, "frozen_moved": self._moved}
        hits = self.detectors.update(step, seen)
        self.hits += hits
        if snap is not None and (hits or (self.every is not None and step % self.every == 0)):
            snap.stats, snap.hits = logged, hits
            self._keep_frozen(snap, frozen)
            self._save(snap, model, optimizer)
        return hits

    def step_failed(self, error: BaseException) -> Path | None:
        """The step begun by the last ``before_update`` raised: save its pre-update state, with a
        ``raised`` hit naming the error, so the failure can be replayed. Call it from the
        training loop's ``except`` before re-raising (``update()`` does it for you). Returns the
        file written, or None (nothing kept, an interrupt, or the save failed)."""
        if self._pending is None or not isinstance(error, Exception):   # Ctrl-C is no finding
            self._pending = None
            return None
        step, snap, model, frozen, optimizer = self._pending
        self._pending = None
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        hit = Hit("raised", type(error).__name__, step, None, f"the step raised {message}")
        self.hits.append(hit)
        if snap is None:
            return None
        snap.hits, snap.stats = [hit], {}
        self._keep_frozen(snap, frozen)
        before = len(self.saved)
        self._save(snap, model, optimizer)
        return self.saved[-1] if len(self.saved) > before else None

    def _keep_frozen(self, snap: Snapshot, frozen: dict[str, torch.nn.Module]) -> None:
        """The frozen modules as the update read them: the clones of those seen moving, the others
        as they are now, and the names of any that changed since ``before_update`` (saved after)."""
        changed = sorted(n for n, m in frozen.items() if n not in snap.frozen and fingerprint(m) != self._prints[n])
        snap.frozen = {**{n: m.state_dict() for n, m in frozen.items()}, **snap.frozen}
        if changed:
            snap.meta = {**snap.meta, "frozen_changed": changed}

    @contextmanager
    def update(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
               batch: Mapping[str, torch.Tensor], generators: dict[str, torch.Generator] | None = None,
               frozen: Mapping[str, torch.nn.Module | None] | None = None,
               scheduler: Any = None) -> Iterator[StepRecord]:
        """`with hook.update(step, model, opt, batch) as rec: rec.log(train_step(...))`; hits in rec.hits."""
        rec = StepRecord(step)
        self.before_update(step, model, optimizer, batch, generators, frozen, scheduler=scheduler)
        try:
            yield rec
        except BaseException as e:
            self.step_failed(e)   # the state that made it fail, kept for replay
            raise
        if rec.stats is None:
            raise RuntimeError("call rec.log(stats) inside `with hook.update(...)`")
        rec.hits = self.after_update(step, rec.stats)

    def _save(self, snap: Snapshot, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        assert self.dir is not None   # snapshots are only captured with a directory
        path = self.dir / snapshot_name(snap.step)
        k = 0
        # never overwritten: another run's file, or this run's own when a step number comes again
        # (a loop counting steps per epoch, a failed step retried): rotation decides what goes
        while path.exists():
            k += 1
            path = self.dir / snapshot_name(snap.step).replace(".pt", f"-{k}.pt")
        if k and self.dir / snapshot_name(snap.step) not in self.saved:
            warnings.warn(f"rlbisect: {self.dir} already holds {snapshot_name(snap.step)} from another run: "
                          f"this one is {path.name}", stacklevel=3)
        try:
            after = model.state_dict()  # live references: written out below, before training resumes
            snap.post_update_sha256 = state_digest(after)
            snap.post_optimizer_sha256 = None if optimizer is None else optimizer_digest(optimizer)
            snap.update_norm = diff_norm(after, snap.model)
            if self.keep_post_update:
                snap.post_update = after
            save_snapshot(path, snap)
        except Exception as e:  # noqa: BLE001 - a debugging aid never stops the training run
            self.errors.append(f"step {snap.step}: {e}")
            warnings.warn(f"rlbisect: snapshot of step {snap.step} not saved: {e}", stacklevel=3)
            return
        self.saved.append(path)
        (self._flagged if snap.hits else self._periodic).append(path)
        while len(self._periodic) > self.keep_last:
            self._delete(self._periodic)
        while len(self._periodic) + len(self._flagged) > self.max_snapshots:
            self._delete(self._periodic if self._periodic else self._flagged)

    def kept(self) -> list[Path]:
        """The files this hook currently keeps on disk, by step."""
        return sorted(self._periodic + self._flagged)

    @staticmethod
    def _delete(paths: list[Path]) -> None:
        paths.pop(0).unlink(missing_ok=True)
