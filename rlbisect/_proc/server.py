"""The one fork server: torch and rlbisect imported once, each request served by a fresh fork.

A request is either ``rlbisect check`` (a caller's whole invocation: its terminal, folder,
environment, umask and arguments) or a probe worker (:data:`~rlbisect._proc.worker.WORKERS`, with
files for its output). The child forked for it *is* that process: it takes the request's file
descriptors, folder, environment and ``sys.path``, runs, and exits; its exit status goes back to the
caller. Every child is a copy of the same pristine interpreter, so requests stay isolated (one
probe's imports, patches and random draws die with its child) and give the numbers a fresh
process would (tests/_proc/test_server.py compares them byte for byte).

It serves only what it can serve faithfully, and refuses (the caller then runs the work itself)
when the caller's interpreter differs: another executable, other interpreter flags, an
environment that differs beyond shell bookkeeping and git's own variables, a ``sys.path`` under
which any module the server has loaded would come from another file; and once any file it
loaded has changed on disk (modification time, size or status change), after which it exits.

``rlbisect warm start`` starts one for the user (a socket in a folder only they can open; the
peer's uid is checked); ``rlbisect run`` starts a private one for its probes when that one
refuses or is not running. Ctrl-C in the caller, or the caller going away, kills the child's whole
process group. It exits after ``--idle`` seconds without a request, on a stop request, on SIGTERM,
or when ``--parent`` exits.

Protocol (SOCK_SEQPACKET, one JSON object per message):

    {"op": "status"}                               -> {"pid", "served", "running", "idle_minutes", "socket"}
    {"op": "stop"}                                 -> {"stopping": true}
    {"op": "run", "target": "cli"|MODULE, "argv", "cwd", "umask", "env", "interpreter"}
      + 3 file descriptors (stdin, stdout, stderr) -> {"pid"} then {"code"}, or {"refused": why}
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from rlbisect._proc import identity as ident
from rlbisect._proc.runner import KILL_GRACE, exit_status, signal_group
from rlbisect._proc.worker import IMPORTS_VAR, WORKERS

MAX_MESSAGE = 1 << 20
#: The program a "cli" request runs (``rlbisect check``), and what the server imports before any
#: request: torch, the checker, the CLI and every worker; never the code under test.
CLI = "rlbisect.cli.app"
PRELOAD = ("torch", "rlbisect.check", CLI, *WORKERS)


class _Server:
    def __init__(self, path: Path, idle: float, parent: int | None):
        self.path, self.idle, self.parent = path, idle, parent
        self.me = ident.interpreter()
        self.environ = dict(os.environ)       # as callers see it: before any import
        from rlbisect._proc.startup import defer_dynamo
        for module in PRELOAD:         # the cost every check and probe would pay, paid once
            importlib.import_module(module)
        defer_dynamo()
        # what importing set (a cold process's imports set it too), applied to each child's own
        self.set_by_imports = {k: v for k, v in os.environ.items() if self.environ.get(k) != v}
        self.files = ident.loaded_files()
        self.modules = ident.loaded_modules()
        self.running: dict[int, list] = {}        # pid -> [connection, kill deadline or None]
        self.served = 0

    def refusal(self, request: dict, fds: list[int]) -> str | None:
        target = request.get("target")
        if target != "cli" and target not in WORKERS:
            return f"it runs `rlbisect check` and rlbisect's probe workers, not {target!r}"
        if target == "cli" and request.get("argv", [])[1:2] != ["check"]:
            return "it serves `rlbisect check` only"
        if len(fds) != 3:
            return "stdin, stdout and stderr did not arrive"
        theirs = request.get("interpreter") or {}
        if why := ident.mismatch(self.me, self.environ, theirs, request.get("env") or {}):
            return f"it was started with {why}"
        # a worker puts the code under test first: nothing preloaded may be found there
        code = [request["code_dir"]] if target != "cli" and request.get("code_dir") else []
        code += [os.path.join(code[0], f) for f in (request.get("env") or {}).get(IMPORTS_VAR, "").split(os.pathsep)
                 if code and f and f != "."]   # and the folders of your editable install (worker_main)
        path = code + list(theirs.get("path") or [])
        if why := ident.shadowed(self.modules, path, request.get("cwd", "/")):
            return why
        if changed := ident.changed(self.files):
            return f"{changed} changed since it started, so it stops now; `rlbisect warm start` starts a fresh one"
        return None

    def accept(self, listener: socket.socket) -> str:
        conn: socket.socket | None
        conn, _ = listener.accept()
        conn.settimeout(5.0)
        fds: list[int] = []
        try:
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
            if uid != os.getuid():
                return "dropped"
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
            request = json.loads(data or b"null")
            op = request.get("op") if isinstance(request, dict) else None
            if op == "status":
                conn.send(json.dumps({"pid": os.getpid(), "served": self.served,
                                      "running": len(self.running), "idle_minutes": self.idle / 60,
                                      "socket": str(self.path)}).encode())
                return "status"
            if op == "stop":
                conn.send(json.dumps({"stopping": True}).encode())
                return "stop"
            if op != "run":
                return "dropped"
            if refused := self.refusal(request, fds):
                conn.send(json.dumps({"refused": refused}).encode())
                return "refused"
            pid = os.fork()
            if pid == 0:
                self.child(request, fds, listener, conn)
            conn.settimeout(None)
            self.running[pid], conn = [conn, None], None   # if the reply fails, the closed socket ends it
            self.running[pid][0].send(json.dumps({"pid": pid}).encode())
            self.served += 1
            return "forked"
        except (OSError, ValueError, AttributeError):
            return "dropped"
        finally:
            for fd in fds:
                os.close(fd)
            if conn is not None:
                conn.close()

    def child(self, request: dict, fds: list[int], listener, conn) -> None:
        """In the forked child: become the caller's process, run, leave."""
        code = 125
        try:
            for other in [listener, conn, *(c for c, _ in self.running.values())]:
                other.close()
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            for sig in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _fresh_stdio()
            os.umask(request["umask"])
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update({**request["env"], **self.set_by_imports})
            sys.path[:] = request["interpreter"]["path"]
            sys.argv = list(request["argv"])
            if request["target"] == "cli":
                importlib.import_module(CLI).main()   # exits through rlbisect._proc.startup.exit_now
            else:
                code = importlib.import_module(request["target"]).main(sys.argv[1:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
        from rlbisect._proc.startup import exit_now
        exit_now(code)

    def serve(self) -> None:
        path = self.path
        if ident.answering(path):
            raise SystemExit(f"a fork server already answers at {path}")
        path.unlink(missing_ok=True)            # a leftover of a server that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(16)
        mine = path.stat().st_ino

        def leave() -> None:      # the socket only if it is still ours: a new server may own the name
            listener.close()
            try:
                if path.stat().st_ino == mine:
                    path.unlink()
            except OSError:
                pass
        last, stopping = time.monotonic(), False
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            while self.running or not stopping:
                waiting = [c for c, _ in self.running.values()]
                ready = select.select(([] if stopping else [listener]) + waiting, [], [],
                                      0.01 if self.running else 1.0)[0]
                for conn in ready:
                    if conn is listener:
                        if self.accept(listener) == "stop":
                            stopping = True
                            leave()
                    else:                               # the caller went away: end its work
                        pid = next(p for p, (c, _) in self.running.items() if c is conn)
                        if self.running[pid][1] is None:
                            signal_group(pid, signal.SIGTERM)
                            self.running[pid][1] = time.monotonic() + KILL_GRACE
                last = self.reap() or last
                if not self.running and (time.monotonic() - last > self.idle or self.orphaned()
                                         or (not ready and ident.changed(self.files))):
                    break                               # idle, alone, or it could only refuse
        except KeyboardInterrupt:
            pass
        finally:
            leave()

    def reap(self) -> float | None:
        """Children that ended: their codes sent back -> the time, if any ended."""
        ended = None
        for pid, (conn, kill_at) in list(self.running.items()):
            if kill_at is not None and time.monotonic() > kill_at:
                signal_group(pid, signal.SIGKILL)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                try:
                    conn.send(json.dumps({"code": exit_status(os.waitstatus_to_exitcode(status))}).encode())
                except OSError:
                    pass
                conn.close()
                signal_group(pid, signal.SIGKILL)          # what it left behind in its group
                del self.running[pid]
                ended = time.monotonic()
        return ended

    def orphaned(self) -> bool:
        if self.parent is None:
            return False
        try:
            os.kill(self.parent, 0)
            return False
        except ProcessLookupError:
            return True
        except PermissionError:
            return False


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _fresh_stdio() -> None:
    """Python's streams over the descriptors the caller sent."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.stdin.encoding)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=sys.stdout.encoding,
                                  errors=sys.stdout.errors, line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=sys.stderr.encoding,
                                  errors="backslashreplace", line_buffering=True)


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser(description="rlbisect's fork server (`rlbisect warm start` starts one)")
    p.add_argument("--socket", required=True, help="the socket to listen on")
    p.add_argument("--idle", type=float, default=1800.0, help="seconds without a request before it exits")
    p.add_argument("--parent", type=int, help="exit when this process has exited")
    a = p.parse_args()
    _Server(Path(a.socket), a.idle, a.parent).serve()
