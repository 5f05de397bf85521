"""A warm server for ``rlbisect check``: torch imported once, every check forked fresh from it.

A check's own work is about 0.4 s; a fresh process first pays 1-1.5 s to import torch
(``benchmarks/bench_probe.py``). ``rlbisect warm start`` starts a server that imports torch and
rlbisect's checker, and nothing of the code under test. While it runs, ``rlbisect check`` hands
its command line to it (:func:`rlbisect.launch.forward`, before anything heavy is imported) and the server forks
a child that *is* that invocation: the caller's terminal (stdin, stdout, stderr passed as file
descriptors), folder, environment, umask and arguments, exit code relayed back. Each child is a copy
of the same pristine interpreter, so checks stay isolated and deterministic: the output is
byte-identical to a cold run (tests/test_warm_server.py), and the trainer is imported in the child,
from disk, as it is now.

The server serves only what it can serve faithfully. It refuses, and the check runs cold with a
one-line note, when the caller's interpreter, ``sys.path`` or environment differ from its own (shell
bookkeeping such as ``PWD`` aside), and when any file it imported has changed on disk since, after
which it exits. Its socket lives in a folder only this user can open, and it checks the caller's
uid. Ctrl-C (or the caller dying) kills the check's whole process group. It exits after
``rlbisect warm start --idle`` minutes without a request, on ``rlbisect warm stop``, or on SIGTERM.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import struct
import sys
import time

from rlbisect.launch import MAX_MESSAGE, SERVED, answering, identity, mismatch, socket_path

KILL_GRACE = 3.0


def _loaded_files() -> dict[str, tuple[int, int]]:
    out = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            st = os.stat(path)
            out[path] = (st.st_mtime_ns, st.st_size)
    return out


def _changed(files: dict[str, tuple[int, int]]) -> str | None:
    for path, (mtime, size) in files.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != (mtime, size):
            return path
    return None


def serve(idle: float) -> None:
    """Load what every check needs, then fork one child per request until idle or stopped."""
    me, environ = identity(), dict(os.environ)      # as the callers see it: before any import
    import torch  # noqa: F401  (the cost every check would pay)

    import rlbisect.check  # noqa: F401
    import rlbisect.cli  # noqa: F401
    import rlbisect.forked  # noqa: F401
    from rlbisect.startup import defer_dynamo
    defer_dynamo()
    # what importing set (a cold check's imports would set it too), applied to each caller's own
    me["set_by_imports"] = {k: v for k, v in os.environ.items() if environ.get(k) != v}
    files, path = _loaded_files(), socket_path()
    if answering():
        raise SystemExit(f"a warm server already answers at {path}")
    if path.exists():
        path.unlink()       # a leftover of a server that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    mine = path.stat().st_ino

    def leave() -> None:            # the socket only if it is still ours: a new server may own the name
        listener.close()
        try:
            if path.stat().st_ino == mine:
                path.unlink()
        except OSError:
            pass
    running: dict[int, list] = {}      # pid -> [connection, kill deadline or None]
    served, last, stopping = 0, time.monotonic(), False
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while running or not stopping:
            waiting = [c for c, _ in running.values()]
            ready = select.select(([] if stopping else [listener]) + waiting, [], [], 0.01 if running else 1.0)[0]
            for conn in ready:
                if conn is listener:
                    answer = _accept(listener, me, files, running, served, idle)
                    served += answer == "forked"
                    if answer == "stop":
                        stopping = True
                        leave()
                else:                                 # the caller went away (Ctrl-C): end its check
                    pid = next(p for p, (c, _) in running.items() if c is conn)
                    if running[pid][1] is None:
                        _killpg(pid, signal.SIGTERM)
                        running[pid][1] = time.monotonic() + KILL_GRACE
            for pid, (conn, kill_at) in list(running.items()):
                if kill_at is not None and time.monotonic() > kill_at:
                    _killpg(pid, signal.SIGKILL)
                done, status_ = os.waitpid(pid, os.WNOHANG)
                if done:
                    code = os.waitstatus_to_exitcode(status_)
                    try:
                        conn.send(json.dumps({"code": code if code >= 0 else 128 - code}).encode())
                    except OSError:
                        pass
                    conn.close()
                    _killpg(pid, signal.SIGKILL)      # what the check left behind in its group
                    del running[pid]
                    last = time.monotonic()
            if not running and (time.monotonic() - last > idle or (not ready and _changed(files))):
                break                                 # idle, or it could only refuse from now on
    except KeyboardInterrupt:
        pass
    finally:
        leave()


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _accept(listener, me: dict, files: dict, running: dict, served: int, idle: float) -> str:
    conn, _ = listener.accept()
    conn.settimeout(5.0)
    fds: list[int] = []
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():
            return "dropped"
        data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
        request = json.loads(data or b"null")
        if not isinstance(request, dict):
            return "dropped"
        if request.get("status"):
            conn.send(json.dumps({"pid": os.getpid(), "served": served, "running": len(running),
                                  "idle_minutes": idle / 60, "socket": listener.getsockname()}).encode())
            return "status"
        if request.get("stop"):
            conn.send(json.dumps({"stopping": True}).encode())
            return "stop"
        if refused := _refusal(me, files, request, fds):
            conn.send(json.dumps({"refused": refused}).encode())
            return "refused"
        pid = os.fork()
        if pid == 0:
            _child(request, me, fds, listener, conn, running)
        conn.settimeout(None)
        running[pid], conn = [conn, None], None      # if the reply fails, the closed socket ends the check
        running[pid][0].send(json.dumps({"pid": pid}).encode())
        return "forked"
    except (OSError, ValueError):
        return "dropped"
    finally:
        for fd in fds:
            os.close(fd)
        if conn is not None:
            conn.close()


def _refusal(me: dict, files: dict, request: dict, fds: list[int]) -> str | None:
    if request.get("argv", [])[1:2] != list(SERVED):
        return "it serves `rlbisect check` only"
    if len(fds) != 3:
        return "stdin, stdout and stderr did not arrive"
    if why := mismatch(me, request):
        return f"it was started with {why}"
    if changed := _changed(files):
        return f"{changed} changed since it started, so it stops now; rlbisect warm start starts a fresh one"
    return None


def _child(request: dict, me: dict, fds: list[int], listener, conn, running) -> None:
    """In the forked child: become the caller's ``rlbisect check``, run it, leave."""
    try:
        for other in [listener, conn, *(c for c, _ in running.values())]:
            other.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.stdin.encoding)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=sys.stdout.encoding,
                                      errors=sys.stdout.errors, line_buffering=os.isatty(1))
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=sys.stderr.encoding,
                                      errors="backslashreplace", line_buffering=True)
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**request["environ"], **me["set_by_imports"]})
        sys.path[0], sys.argv = request["path0"], request["argv"]
        from rlbisect.cli import main
        main()                          # exits through rlbisect.startup.exit_now
    except BaseException:
        import traceback
        traceback.print_exc()
    os._exit(2)                         # only reached when the CLI did not exit itself


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="rlbisect's warm server (start it with `rlbisect warm start`)")
    parser.add_argument("--idle", type=float, default=1800.0, help="seconds without a request before it exits")
    serve(parser.parse_args().idle)
