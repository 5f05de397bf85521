"""Executors: where a bisect's probes run, several at once.

    from rlbisect.bisect.executors import Checkout, RayExecutor
    ex = RayExecutor(jobs=4, address="auto", num_gpus=1)      # or LocalExecutor(jobs=4)
    ex.open()
    future = ex.submit(commit, Checkout(repo="/src/trainer", local=...), predicate, timeout=600)
    probe = future.result()           # a Probe; our own failures are skips, never bad
    ex.close()

:class:`LocalExecutor` (the default) runs each probe in a thread of this process. Threads are
enough: every predicate does its work in a subprocess (:mod:`rlbisect._proc`), which owns the
probe's process group, its timeout and the reaction to :data:`~rlbisect.bisect.predicates.STOP`.

:class:`RayExecutor` makes each probe a Ray task that can ask for GPUs. The task materializes
the commit *on its node*, in a node-local temporary directory removed when the task ends: a
private repository borrowing the objects of the repository path when the node sees it (a shared
filesystem; the user's repository is only read, see :mod:`rlbisect.git.sandbox`), or a ``git clone``
of ``--clone-url`` (the commit must be pushed there). The predicate object travels with the task (cloudpickle) and rlbisect must be
installed on the nodes. Marks still go into git on the driver. ``ray`` is imported only here,
only for ``--executor ray``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import dataclasses
import os
import shutil
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlbisect._proc.runner import KILL_GRACE, STOP
from rlbisect._proc.tempdirs import owned_tempdir
from rlbisect.bisect.predicates import Predicate, Probe

from rlbisect.errors import Cause, GitError, InputError, Verdict
from rlbisect.git.sandbox import node_checkout

EXECUTORS = ("local", "ray")
RAY_HINT = "pip install 'rlbisect[ray]'"


class ExecutorError(InputError):
    """The executor cannot be used as asked (exit 2, one line; nothing changed)."""


@dataclass
class Checkout:
    """Where a probe gets its commit's files.

    ``local`` materializes the commit on this machine (a slot of the run's sandbox); ``repo`` (a
    path the nodes may see) and ``clone_url`` are what a remote node uses. ``good`` is GOOD's
    id, for predicates that compare against GOOD (their ``setup(good, checkout)``).
    """

    repo: str
    clone_url: str | None = None
    good: str | None = None
    local: Callable[[], Path] | None = None

    def remote(self) -> dict:
        """What travels to a node: plain data only."""
        return {"repo": self.repo, "clone_url": self.clone_url, "good": self.good}


class NodeOnly:
    """Placeholder checkout of GOOD given to a predicate on the driver; the Ray task binds the
    predicate again with a checkout made on its node (a driver path means nothing there)."""

    def __call__(self) -> Path:
        raise RuntimeError("GOOD is checked out on the Ray node, not on the driver")


def _safe_probe(work: Callable[[], Probe]) -> Probe:
    try:
        return work()
    except (GitError, OSError) as e:
        return Probe(Verdict.SKIP, reason=f"checkout failed: {e}", cause=Cause.MACHINERY)
    except Exception as e:  # a crash in the probe machinery is never evidence of a bad commit
        return Probe(Verdict.SKIP, reason=f"probe crashed: {type(e).__name__}: {e}", cause=Cause.MACHINERY)


class Executor(ABC):
    """Runs probes concurrently. ``submit`` returns a future whose result is a :class:`Probe`
    (never an exception); ``stop`` ends in-flight probes and returns once they are over."""

    name = "executor"
    remote = False   # True when probes run elsewhere and materialize their own checkout

    def __init__(self, jobs: int = 1):
        self.jobs = jobs

    def open(self) -> None:
        """Get ready. Called before the bisect traps signals (``ray.init`` sets a handler)."""

    @abstractmethod
    def submit(self, commit: str, checkout: Checkout, predicate: Predicate,
               timeout: float | None) -> "Future[Probe]":
        """Start probing `commit`; the future's result is its Probe."""

    def stop(self, futures: set[Future]) -> None:
        """End the given in-flight probes (rlbisect got a signal or failed) and wait for them."""

    def close(self) -> None:
        """Release what :meth:`open` took."""


class LocalExecutor(Executor):
    """Probes in threads of this process, each in its own worktree."""

    name = "local"

    def __init__(self, jobs: int = 1):
        super().__init__(jobs)
        self._pool: ThreadPoolExecutor | None = None

    def open(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.jobs),
                                        thread_name_prefix="rlbisect-probe")

    def submit(self, commit, checkout, predicate, timeout):
        if self._pool is None:
            self.open()
        assert self._pool is not None   # open() made it
        assert checkout.local is not None, "the local executor needs a local checkout"
        return self._pool.submit(_safe_probe,
                                 lambda: predicate.probe(checkout.local(), commit, timeout))

    def stop(self, futures):
        for f in futures:
            f.cancel()          # not started yet: never starts
        STOP.set()              # running: the runner kills each probe's process group
        wait_futures(futures)   # a thread still in a checkout must finish before cleanup

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError("--executor ray needs Ray, which is not installed: "
                            f"{RAY_HINT}") from None
    return ray


class RayExecutor(Executor):
    """Each probe is a Ray task (``num_gpus`` per probe) that checks its commit out on its node.

    ``address`` None uses ``RAY_ADDRESS`` if set, else starts a local instance for this run
    (``"auto"`` joins a cluster started with ``ray start`` on this machine); a Ray session
    already open in this process is reused and left open.
    """

    name = "ray"
    remote = True

    def __init__(self, jobs: int = 1, address: str | None = None, num_gpus: float = 0.0,
                 clone_url: str | None = None, num_cpus: float = 1.0):
        super().__init__(jobs)
        self.ray = _import_ray()
        self.address, self.num_gpus, self.num_cpus = address, num_gpus, num_cpus
        self.clone_url = clone_url
        self._owned = self._local = False
        self._refs: dict[Future, object] = {}
        self._task: Any = None   # ray.remote(...) once open; Ray is optional

    def open(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            kwargs: dict = {"address": self.address, "logging_level": "WARNING",
                            "log_to_driver": False}
            if self.address is None and not os.environ.get("RAY_ADDRESS"):
                # a throw-away local instance ("local": not whatever `ray start` left behind),
                # no dashboard, a small object store (probes return a few numbers) that also
                # fits a container's small /dev/shm
                kwargs.update(address="local", include_dashboard=False,
                              object_store_memory=80 * 2**20)
                self._local = True
            try:
                ray.init(**kwargs)
            except Exception as e:
                where = self.address or "a local instance"
                msg = str(e).strip().splitlines()
                raise ExecutorError(f"cannot start Ray ({where}): {type(e).__name__}: "
                                    f"{msg[0] if msg else ''}") from None
            self._owned = True
        self._task = ray.remote(_probe_on_node)
        have = ray.cluster_resources().get("GPU", 0)
        if self.num_gpus > have and self._local:   # no node will ever join: fail now
            self.close()
            raise ExecutorError(f"--ray-gpus {self.num_gpus:g}: this machine has {have:g} GPUs "
                                "for a local Ray instance; give --ray-address of a cluster")
        if self.num_gpus > have:   # an autoscaling cluster may still add GPU nodes: warn only
            print(f"rlbisect: warning: the Ray cluster has {have:g} GPUs now; probe tasks "
                  f"asking for {self.num_gpus:g} wait until a node with them joins",
                  file=sys.stderr)

    def submit(self, commit, checkout, predicate, timeout):
        spec = checkout.remote()
        spec["clone_url"] = spec["clone_url"] or self.clone_url
        try:
            ref = self._task.options(
                num_cpus=self.num_cpus, num_gpus=self.num_gpus,
                max_retries=0,  # a retry would run the probe twice; a lost task is a skip
                name=f"rlbisect-probe-{commit[:10]}").remote(commit, spec, predicate, timeout)
        except Exception as e:   # e.g. a predicate that cannot be pickled: no probe can run
            msg = (str(e).strip().splitlines() or [""])[0]
            raise ExecutorError(f"cannot send the probe to Ray: {type(e).__name__}: "
                                f"{msg}") from None
        out: Future = Future()
        out.set_running_or_notify_cancel()
        self._refs[out] = ref

        def finished(f: Future) -> None:
            self._refs.pop(out, None)
            try:
                out.set_result(Probe(**f.result()))
            except Exception as e:
                cancelled = "Cancel" in type(e).__name__
                reason = ("interrupted" if cancelled else f"Ray task failed: {type(e).__name__}: "
                          f"{(str(e).strip().splitlines() or [''])[-1][:200]}")
                out.set_result(Probe(Verdict.SKIP, reason=reason,
                                     cause=Cause.INTERRUPTED if cancelled else Cause.MACHINERY))
        ref.future().add_done_callback(finished)
        return out

    def stop(self, futures):
        refs = [self._refs[f] for f in futures if f in self._refs]
        for ref in refs:   # KeyboardInterrupt in the task: it kills its probe's process group
            self.ray.cancel(ref)
        _, left = wait_futures(futures, timeout=2 * KILL_GRACE + 5)
        for f in left:     # a task that did not react in time: kill its worker
            if f in self._refs:
                self.ray.cancel(self._refs[f], force=True)
        wait_futures(futures, timeout=10)

    def close(self):
        if self._owned:
            self.ray.shutdown()
            self._owned = False


def make_executor(options) -> Executor:
    """The executor a :class:`~rlbisect.bisect.options.BisectOptions` asks for (options are
    validated there); :class:`ExecutorError` (exit 2) when Ray is missing."""
    if options.executor == "local":
        return LocalExecutor(options.jobs)
    return RayExecutor(options.jobs, options.ray_address, options.ray_gpus, options.clone_url)


# ---- on the Ray node ----------------------------------------------------------------------

def _probe_on_node(commit: str, spec: dict, predicate: Predicate, timeout: float | None) -> dict:
    """The Ray task: check out, probe, clean up; returns the Probe as a plain dict."""
    STOP.clear()   # a reused worker process may still hold the flag of a cancelled task
    tmp = owned_tempdir("node")
    box: list[Probe] = []

    def work() -> Probe:
        worktree = node_checkout(spec["repo"], spec.get("clone_url"), commit, tmp / "probe")
        if spec.get("good"):
            predicate.setup(spec["good"], lambda: node_checkout(
                spec["repo"], spec.get("clone_url"), spec["good"], tmp / "good"))
        return predicate.probe(worktree, commit, timeout)

    # The probe runs in a thread so that Ray's cancel (a KeyboardInterrupt in this thread)
    # reaches us while it runs: we set STOP, the runner kills the process group, we clean up.
    t = threading.Thread(target=lambda: box.append(_safe_probe(work)), daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.1)
    except KeyboardInterrupt:
        STOP.set()
        while t.is_alive():
            t.join(0.1)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dataclasses.asdict(box[0])
