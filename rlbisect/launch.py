"""How an invocation starts: ``rlbisect check`` in the warm server when one is up, the rest here.

Nothing heavy is imported before that choice: handing a check over to :mod:`rlbisect.warm_server`
costs about 50 ms where importing torch costs 1-1.5 s. Also the caller's side of ``rlbisect warm
start|stop|status``, and what a caller must share with a server for the server to act as it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

#: Variables a shell changes between commands; nothing rlbisect or torch imports reads them.
VOLATILE = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "LS_COLORS",
                      "PS1", "PROMPT_COMMAND", "TMUX_PANE", "WINDOWID", "SSH_TTY", "TERM_SESSION_ID"})
#: The commands the server runs: ``rlbisect check`` and nothing else.
SERVED = ("check",)
MAX_MESSAGE = 1 << 20


class WarmError(Exception):
    """The warm server could not be started, reached or stopped (the CLI makes it exit 2)."""


def home(create: bool = True) -> Path:
    """The folder of this user's servers: ``$RLBISECT_WARM_DIR``, else a private folder in
    ``$XDG_RUNTIME_DIR`` or the temporary folder. Refused unless it is this user's and mode 0700:
    whoever can write there could stand in for the server."""
    path = Path(os.environ.get("RLBISECT_WARM_DIR") or os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(), f"rlbisect-{os.getuid()}"))
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WarmError(f"{path} must be a folder of this user's that no one else can open "
                        f"(mode {oct(st.st_mode & 0o777)}); set RLBISECT_WARM_DIR to another")
    return path


def socket_path(create: bool = True) -> Path:
    """One server per interpreter (each virtualenv has its own)."""
    return home(create) / f"warm-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}.sock"


def identity() -> dict:
    """What must match between the server and a caller for the server's imports to be the caller's."""
    return {"executable": sys.executable, "path": sys.path[1:], "flags": list(sys.flags),
            "env": {k: v for k, v in os.environ.items() if k not in VOLATILE}}


def mismatch(mine: dict, theirs: dict) -> str | None:
    """What differs between two :func:`identity` records, in words, or None."""
    for key in ("executable", "path", "flags"):
        if mine[key] != theirs.get(key):
            return f"a different {'sys.path' if key == 'path' else key}"
    env = theirs.get("env", {})
    differ = sorted(k for k in mine["env"].keys() | env.keys() if mine["env"].get(k) != env.get(k))
    return f"a different environment ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})" if differ else None


def _connect() -> socket.socket | None:
    try:
        path = socket_path(create=False)         # a check without a server leaves nothing behind
    except (WarmError, OSError):
        return None
    if not path.exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        return None
    return s


def _ask(message: dict, timeout: float = 10.0) -> dict | None:
    """One request and its reply (status, stop), or None when no server answers."""
    s = _connect()
    if s is None:
        return None
    with s:
        s.settimeout(timeout)
        try:
            s.send(json.dumps(message).encode())
            return json.loads(s.recv(MAX_MESSAGE) or b"null")
        except (OSError, ValueError):
            return None


def forward(argv: list[str]) -> int | None:
    """Run ``rlbisect *argv`` in the warm server -> its exit code, or None to run it here (no
    server, or one that refused with a note on stderr)."""
    if argv[:1] != list(SERVED) or os.environ.get("RLBISECT_COLD") == "1":
        return None
    s = _connect()
    if s is None:
        return None
    umask = os.umask(0)
    os.umask(umask)
    try:
        request = {**identity(), "argv": [sys.argv[0], *argv], "cwd": os.getcwd(), "umask": umask,
                   "path0": sys.path[0], "environ": dict(os.environ)}
        fds = [fd if _is_open(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
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


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def status() -> dict | None:
    return _ask({"status": True})


def stop(wait: float = 30.0) -> bool:
    """Stop this interpreter's server -> whether one was running."""
    reply = _ask({"stop": True})
    if reply is None:
        return False
    deadline = time.monotonic() + wait
    while answering() and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def answering() -> bool:
    s = _connect()
    if s is not None:
        s.close()
    return s is not None


def start(idle_minutes: float, timeout: float = 120.0) -> dict:
    """Start a fresh server for this interpreter and environment (replacing a running one) ->
    its status once it answers."""
    import subprocess
    if sys.platform != "linux" or not hasattr(socket, "send_fds"):
        raise WarmError("the warm server needs Linux (it passes your terminal over a Unix socket); "
                        "checks run cold here")
    stop()
    folder = home()
    log = folder / (socket_path().stem + ".log")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rlbisect.warm_server", "--idle", str(idle_minutes * 60)],
                                cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
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


def main() -> None:
    """The console entry point."""
    code = forward(sys.argv[1:])
    if code is None:
        from rlbisect.cli import main as cli
        cli()
    sys.stdout.flush()
    raise SystemExit(code)
