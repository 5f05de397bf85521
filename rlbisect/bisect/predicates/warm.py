"""Warm probe workers: rlbisect's own Python probes start from an interpreter that has torch loaded.

A fresh ``python -I`` pays about a second for ``import torch`` before a probe does any work
(``benchmarks/bench_probe.py``). A warm server starts with the first probe of each slot: it
imports torch and rlbisect's checker, nothing else, and then forks one child per probe. Each
child is a copy of that same pristine interpreter, so probes stay isolated from each other (one
probe's imports, patches and RNG draws die with its child) and deterministic (every child starts
from identical state); the code under test is imported only in the child, from its checkout.

The child is treated like :func:`~.command.run_command`'s subprocess: its own session and
process group, stdin /dev/null, stdout and stderr to files, killed as a group on timeout or
interrupt and by the watchdog if rlbisect dies. If anything about the server fails, the probe
runs in a fresh interpreter instead. ``RLBISECT_COLD=1`` makes every probe do so.

    run_python("rlbisect.bisect.predicates.invariants", [checkout, "--episodes", "64"], checkout, 600)
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from rlbisect.bisect.predicates import STOP
from rlbisect.bisect.predicates.command import (KILL_GRACE, CommandResult, _Watchdog,
                                                run_command)

#: The workers a server may run: rlbisect's own, each with ``main(argv) -> exit code``.
WORKERS = ("rlbisect.bisect.predicates.invariants", "rlbisect.bisect.predicates.train_runs")
#: How long a server may take to import torch before the probe runs cold instead.
START_TIMEOUT = 120.0


def run_python(module: str, args: Sequence[str], cwd: Path, timeout: float | None = None) -> CommandResult:
    """``python -I -m module *args`` in ``cwd``: in a warm child when possible, else fresh."""
    if module in WORKERS and hasattr(os, "fork") and os.environ.get("RLBISECT_COLD") != "1":
        server = _Pool.take()
        if server is not None:
            result = server.run(module, list(args), cwd, timeout)
            if result is not None:
                _Pool.give(server)
                return result
            server.close()
    return run_command([sys.executable, "-I", "-m", module, *args], cwd, timeout)


class _Server:
    def __init__(self):
        self.env = _environment()
        self.proc = subprocess.Popen([sys.executable, "-I", "-m", __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        _Watchdog.watch(self.proc.pid)
        self.ready = False

    def _reply(self, deadline: float | None, stoppable: bool = True) -> dict | None:
        """The server's next line, or None if it died, the deadline passed or (``stoppable``)
        rlbisect is being interrupted."""
        while not (stoppable and STOP.is_set()) and (deadline is None or time.perf_counter() < deadline):
            if select.select([self.proc.stdout], [], [], 0.05)[0]:
                try:
                    return json.loads(self.proc.stdout.readline() or "null")
                except ValueError:
                    return None
        return None

    def run(self, module: str, args: list[str], cwd: Path, timeout: float | None) -> CommandResult | None:
        t0 = time.perf_counter()
        if not self.ready:
            self.ready = self._reply(t0 + START_TIMEOUT) == {"ready": True}
            if not self.ready:
                return None
        with tempfile.NamedTemporaryFile() as out, tempfile.NamedTemporaryFile() as err:
            request = {"module": module, "args": args, "cwd": str(cwd), "out": out.name, "err": err.name}
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except OSError:
                return None
            started = self._reply(time.perf_counter() + 30.0)
            if not started or "pid" not in started:
                return None
            pid = started["pid"]
            _Watchdog.watch(pid)
            timed_out = interrupted = False
            try:
                deadline = None if timeout is None else t0 + timeout
                done = self._reply(deadline)
                if done is None:
                    interrupted, timed_out = STOP.is_set(), not STOP.is_set()
                    done = self._kill(pid)
            finally:
                try:
                    os.killpg(pid, signal.SIGKILL)      # stragglers in the group
                except (ProcessLookupError, PermissionError):
                    pass
                _Watchdog.release(pid)
            if done is None or "code" not in done:
                return None
            return CommandResult(done["code"], time.perf_counter() - t0, timed_out, interrupted,
                                 Path(out.name).read_bytes().decode(errors="replace"),
                                 Path(err.name).read_bytes().decode(errors="replace"))

    def _kill(self, pid: int) -> dict | None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            reply = self._reply(time.perf_counter() + KILL_GRACE, stoppable=False)
            if reply is not None:
                return reply
        return None

    def close(self) -> None:
        """An idle server holds nothing worth a clean exit."""
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:         # unflushed bytes to a dead server
                pass
        _Watchdog.release(self.proc.pid)


class _Pool:
    """Idle servers of this process, one per probe running at once (``--jobs``); a server
    serves only probes started under the environment it was started with."""

    _lock = threading.Lock()
    _idle: list[_Server] = []
    _owner: int | None = None

    @classmethod
    def take(cls) -> _Server | None:
        with cls._lock:
            if cls._owner != os.getpid():        # first use, or a forked copy of rlbisect
                cls._idle, cls._owner = [], os.getpid()
                atexit.register(cls.close_all)
            env = _environment()
            stale = [server for server in cls._idle if server.env != env]
            cls._idle = [server for server in cls._idle if server.env == env]
            server = cls._idle.pop() if cls._idle else None
        for old in stale:           # started under an environment that is no longer ours
            old.close()
        if server is not None:
            return server
        try:
            return _Server()
        except OSError:
            return None

    @classmethod
    def give(cls, server: _Server | None) -> None:
        if server is not None:
            with cls._lock:
                cls._idle.append(server)

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            idle, cls._idle = cls._idle, []
        for server in idle:
            server.close()


def _environment() -> frozenset:
    return frozenset(os.environ.items())


def _child(request: dict, reply_fd: int) -> None:
    """In the forked child: become the probe process, run the worker, leave."""
    from rlbisect.startup import exit_now
    code = 1
    try:
        os.close(reply_fd)
        os.setsid()
        sys.stdin = open(os.devnull)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["out"], os.O_WRONLY),
                                (2, request["err"], os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        sys.argv = [request["module"], *request["args"]]
        code = importlib.import_module(request["module"]).main(request["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    exit_now(code)


def serve() -> None:
    """The server: load what every probe needs, then fork one child per request line."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)                  # stray prints must not enter the protocol
    import torch  # noqa: F401  (the cost every probe would pay)

    from rlbisect.startup import defer_dynamo
    defer_dynamo()
    for module in WORKERS:
        importlib.import_module(module)
    import rlbisect.check  # noqa: F401
    reply.write(json.dumps({"ready": True}) + "\n")
    requests = sys.stdin.buffer
    while line := requests.readline():
        request = json.loads(line)
        if request.get("module") not in WORKERS:
            reply.write(json.dumps({"error": "not an rlbisect worker"}) + "\n")
            continue
        pid = os.fork()
        if pid == 0:
            _child(request, reply.fileno())
        reply.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        reply.write(json.dumps({"code": code if code >= 0 else 128 - code}) + "\n")


if __name__ == "__main__":
    serve()
