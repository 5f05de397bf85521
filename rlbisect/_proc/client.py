"""The caller's side of the fork servers: hand work over, or do it here.

* :func:`forward` offers ``rlbisect check`` to this user's warm server before anything heavy is
  imported (about 50 ms where importing torch costs a second): the check runs there with this
  terminal, folder and environment, and its exit code comes back.
* :func:`run_python` runs one of rlbisect's probe workers for a bisect: in this user's warm
  server if it takes the request, else in a private server this process starts on first use
  (one for all its probes, ``--jobs`` included, gone when the process is), else in a fresh
  ``python -I``. ``RLBISECT_COLD=1`` always does the last.
* :func:`start`, :func:`stop`, :func:`status`: ``rlbisect warm start|stop|status``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from rlbisect._proc import identity as ident
from rlbisect._proc.identity import WarmError
from rlbisect._proc.tempdirs import owned_tempdir
from rlbisect._proc.worker import Reply, read_reply
from rlbisect._proc.runner import (STOP, Completed, Watchdog, output_files, run, signal_group,
                                   supervise, tail_of)

MAX_MESSAGE = 1 << 20
#: How long a private server may take to import torch before probes run cold instead.
START_TIMEOUT = 120.0
SERVER = "rlbisect._proc.server"


def _cold() -> bool:
    return os.environ.get("RLBISECT_COLD") == "1" or not hasattr(socket, "send_fds")


def _umask() -> int:
    umask = os.umask(0)       # the only way to read it; done once, before any thread
    os.umask(umask)
    return umask


_UMASK = _umask()


def _ask(path: Path, message: dict, timeout: float = 10.0) -> dict | None:
    """One request and its reply (status, stop), or None when no server answers."""
    s = ident.connect(path)
    if s is None:
        return None
    with s:
        s.settimeout(timeout)
        try:
            socket.send_fds(s, [json.dumps(message).encode()], [])
            return json.loads(s.recv(MAX_MESSAGE) or b"null")
        except (OSError, ValueError):
            return None


def _user_socket() -> Path | None:
    try:
        return ident.user_socket(create=False)     # asking leaves nothing behind
    except (WarmError, OSError):
        return None


def _open_fds() -> list[int]:
    def usable(fd: int) -> int:
        try:
            os.fstat(fd)
            return fd
        except OSError:
            return os.open(os.devnull, os.O_RDWR)
    return [usable(fd) for fd in (0, 1, 2)]


def forward(argv: list[str]) -> int | None:
    """Run ``rlbisect *argv`` in the warm server -> its exit code, or None to run it here (no
    server, or one that refused, with a note on stderr)."""
    path = _user_socket()
    if argv[:1] != ["check"] or _cold() or path is None:
        return None
    s = ident.connect(path)
    if s is None:
        return None
    try:
        request = {"op": "run", "target": "cli", "argv": [sys.argv[0], *argv], "cwd": os.getcwd(),
                   "umask": _UMASK, "env": dict(os.environ), "interpreter": ident.interpreter()}
        fds = _open_fds()
    except OSError:                     # no current folder, say: the CLI says what is wrong
        s.close()
        return None
    started = None
    with s:
        try:
            socket.send_fds(s, [json.dumps(request).encode()], fds)
            started = json.loads(s.recv(MAX_MESSAGE) or b"null")
            if not started or "pid" not in started:
                if started and started.get("refused"):
                    print(f"rlbisect: the warm server did not take this check ({started['refused']}); "
                          "running it here", file=sys.stderr)
                return None
            done = json.loads(s.recv(MAX_MESSAGE) or b"null")
        except KeyboardInterrupt:       # the closed socket makes the server kill the check
            return 130
        except (OSError, ValueError):
            if not started:             # nothing ran there: run it here
                return None
            done = None
    if not done or "code" not in done:
        print("rlbisect: the warm server stopped during the check: no result", file=sys.stderr)
        return 2
    return done["code"]


def _in_server(path: Path, module: str, argv: list[str], cwd: Path, timeout: float | None,
               env: dict[str, str]) -> Completed | None:
    """One worker run by the server at ``path`` -> what it did, or None when the server is not
    there or refuses (nothing ran)."""
    t0 = time.perf_counter()
    s = ident.connect(path)
    if s is None:
        return None
    out, err = output_files()
    stdin = os.open(os.devnull, os.O_RDONLY)
    request = {"op": "run", "target": module, "argv": [module, *argv], "cwd": str(cwd), "code_dir": str(cwd),
               "umask": _UMASK, "env": env, "interpreter": ident.isolated_interpreter()}
    with s, out, err:
        try:
            s.settimeout(30.0)
            socket.send_fds(s, [json.dumps(request).encode()], [stdin, out.fileno(), err.fileno()])
            started = json.loads(s.recv(MAX_MESSAGE) or b"null")
        except (OSError, ValueError):
            started = None
        finally:
            os.close(stdin)
        if not isinstance(started, dict) or "pid" not in started:
            return None
        pid, code = started["pid"], None
        Watchdog.watch(pid)
        s.settimeout(None)

        def finished(wait: float | None) -> bool:
            nonlocal code
            s.settimeout(wait)
            try:
                reply = json.loads(s.recv(MAX_MESSAGE) or b"{}")   # the server gone: no code
            except TimeoutError:
                return False
            except (OSError, ValueError):
                reply = {}
            code = reply.get("code")
            return True
        try:
            timed_out, interrupted = supervise(pid, finished, None if timeout is None else t0 + timeout)
        finally:
            signal_group(pid, signal.SIGKILL)
            Watchdog.release(pid)
        return Completed(code, time.perf_counter() - t0, timed_out, interrupted, tail_of(out), tail_of(err))


class _Private:
    """This process's own fork server, started on the first probe that needs one and stopped by
    :func:`close_private` (a bisect calls it when it ends) or at exit."""

    lock = threading.Lock()
    path: Path | None = None
    proc: subprocess.Popen | None = None
    owner: int | None = None
    failed = False          # it could not start: this run's probes run cold

    @classmethod
    def socket(cls) -> Path | None:
        with cls.lock:
            if cls.owner == os.getpid():
                if cls.proc is not None and cls.proc.poll() is None:
                    return cls.path
                if cls.failed:
                    return None
                cls._stop()                                  # it died: a fresh one
            else:                                            # first use, or a forked copy of rlbisect
                cls.proc, cls.path, cls.owner = None, None, os.getpid()
                atexit.register(close_private)
            cls.failed = True
            cls.path = owned_tempdir("server") / "fork.sock"
            try:
                cls.proc = subprocess.Popen(
                    [sys.executable, "-I", "-m", SERVER, "--socket", str(cls.path), "--idle", "3600",
                     "--parent", str(os.getpid())], stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError:
                return None
            Watchdog.watch(cls.proc.pid)
            deadline = time.perf_counter() + START_TIMEOUT
            while time.perf_counter() < deadline and not STOP.is_set() and cls.proc.poll() is None:
                if ident.answering(cls.path):
                    cls.failed = False
                    return cls.path
                time.sleep(0.02)
            return None

    @classmethod
    def _stop(cls) -> None:
        if cls.proc is not None:
            signal_group(cls.proc.pid, signal.SIGKILL)   # idle between probes: nothing to finish
            cls.proc.wait()
            Watchdog.release(cls.proc.pid)
            cls.proc = None
        if cls.path is not None:
            shutil.rmtree(cls.path.parent, ignore_errors=True)
            cls.path = None


def close_private() -> None:
    """Stop this process's private fork server, if it started one; the next probe starts anew."""
    with _Private.lock:
        if _Private.owner == os.getpid():
            _Private._stop()
            _Private.failed = False


def run_python(module: str, argv: Sequence[str], cwd: Path, timeout: float | None = None,
               env: dict[str, str] | None = None) -> Completed:
    """``python -I -m module *argv`` in ``cwd``: forked from a server when one takes it, else fresh."""
    env = dict(os.environ if env is None else env)
    if not _cold():
        for server in (_user_socket, _Private.socket):       # the private one only if need be
            path = server()
            if path is not None and (done := _in_server(path, module, list(argv), cwd, timeout, env)) is not None:
                return done
    return run([sys.executable, "-I", "-m", module, *argv], cwd, timeout, env)


def status() -> dict | None:
    path = _user_socket()
    return None if path is None else _ask(path, {"op": "status"})


def stop(wait: float = 30.0) -> bool:
    """Stop this interpreter's warm server -> whether one was running."""
    path = _user_socket()
    if path is None or _ask(path, {"op": "stop"}) is None:
        return False
    deadline = time.monotonic() + wait
    while ident.answering(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def start(idle_minutes: float, timeout: float = START_TIMEOUT) -> dict:
    """Start a fresh warm server for this interpreter and environment (replacing a running one)
    -> its status once it answers."""
    if sys.platform != "linux" or not hasattr(socket, "send_fds"):
        raise WarmError("the warm server needs Linux (it passes your terminal over a Unix socket); "
                        "checks run cold here")
    stop()
    folder, path = ident.home(), ident.user_socket()
    log = folder / (path.stem + ".log")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", SERVER, "--socket", str(path),
                                 "--idle", str(idle_minutes * 60)], cwd=folder,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WarmError(f"the warm server exited with {proc.returncode}: "
                            f"{log.read_text(errors='replace')[-800:].strip()}")
        if (reply := status()) is not None:
            proc.returncode = 0       # it runs on, detached: nothing to wait for here
            return reply
        time.sleep(0.1)
    proc.kill()
    raise WarmError(f"the warm server did not answer within {timeout:.0f} s (log: {log})")


def ask(module: str, args: Sequence[str], code_dir: Path, timeout: float | None = None,
        env: dict[str, str] | None = None) -> tuple[Reply | None, Completed]:
    """Run a probe worker on the code in ``code_dir`` (:mod:`rlbisect._proc.worker`) -> its reply
    (None when it gave none, or was stopped) and what the process did."""
    with tempfile.TemporaryDirectory(prefix=f"rlbisect-{os.getpid()}-reply-") as tmp:
        path = Path(tmp) / "reply.json"
        done = run_python(module, [*args, "--code-dir", str(code_dir), "--reply", str(path)],
                          code_dir, timeout, env)
        return (None if done.stopped else read_reply(path)), done
