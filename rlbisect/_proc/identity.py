"""When a forked child of a server is the process a caller would have started itself.

A fork server imported torch and rlbisect under its own interpreter, flags, environment and
``sys.path``. A child it forks gives the caller's numbers only if the caller's interpreter would
have imported the very same files under the same settings; these functions decide that, and
where this user's servers live.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from rlbisect._proc.worker import IMPORTS_VAR

#: Variables a shell changes between commands; nothing rlbisect or torch imports reads them.
VOLATILE = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "LS_COLORS",
                      "PS1", "PROMPT_COMMAND", "TMUX_PANE", "WINDOWID", "SSH_TTY", "TERM_SESSION_ID"})
#: Interpreter flags that change what the same code does (the ones that only shape ``sys.path``
#: or the reading of PYTHON* variables are compared through their effect instead).
FLAGS = ("optimize", "bytes_warning", "dev_mode", "utf8_mode",
         "warn_default_encoding", "int_max_str_digits", "verbose", "quiet")


class WarmError(Exception):
    """A fork server could not be started, reached or stopped (the CLI makes it exit 2)."""


def interpreter() -> dict:
    """This interpreter as a caller describes it to a server."""
    return {"executable": sys.executable, "path": list(sys.path),
            "flags": {f: getattr(sys.flags, f, None) for f in FLAGS},
            "warnoptions": list(sys.warnoptions)}


@lru_cache(maxsize=None)
def isolated_interpreter() -> dict:
    """What ``python -I`` (a cold probe worker) would be: asked of one, once per process."""
    import json
    import subprocess
    code = ("import json, sys; print(json.dumps({'executable': sys.executable, 'path': sys.path, "
            f"'flags': {{f: getattr(sys.flags, f, None) for f in {FLAGS!r}}}, 'warnoptions': sys.warnoptions}}))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _comparable(env: dict[str, str]) -> dict[str, str]:
    """The variables that could change what a server's imports did: not the shell's bookkeeping,
    not git's (rlbisect scrubs those per probe, rlbisect.git.repo.scrubbed)."""
    return {k: v for k, v in env.items() if k not in VOLATILE and k != IMPORTS_VAR   # read after the fork
            and not k.startswith("GIT_")}


def mismatch(mine: dict, my_env: dict[str, str], theirs: dict, their_env: dict[str, str]) -> str | None:
    """What differs between the server's interpreter and a caller's, in words, or None."""
    for key in ("executable", "flags", "warnoptions"):
        if mine.get(key) != theirs.get(key):
            return f"a different {key}"
    a, b = _comparable(my_env), _comparable(their_env)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return f"a different environment ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})" if differ else None


def loaded_modules() -> dict[str, str]:
    """Top-level module -> the file it was loaded from, for every module loaded from a file (but
    the ``FILE.py`` adapters rlbisect loads by path as ``_rlbisect_adapter_*``: no sys.path finds
    those, and the file itself is what identifies them). A submodule also entered under a top-level
    alias (scipy's Cython modules: `_csparsetools` is `scipy.sparse._csparsetools`) is its package's:
    no sys.path finds the alias either."""
    out = {}
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if name.startswith("_rlbisect_adapter_") or spec is None or spec.name != name:
            continue
        if "." not in name and not name.startswith("__") and spec.has_location and spec.origin:
            out[name] = spec.origin
    return out


def shadowed(modules: dict[str, str], path: list[str], cwd: str) -> str | None:
    """The first module the server loaded that ``path`` would find elsewhere, in words, or None."""
    return _shadowed(tuple(sorted(modules.items())), tuple(p or cwd for p in path))


@lru_cache(maxsize=64)
def _shadowed(modules: tuple, path: tuple) -> str | None:
    saved = sys.path[:]
    sys.path[:] = path         # the finders of a top-level import read sys.path: show them theirs
    try:
        for name, origin in modules:
            found = _origin(name)
            if found != origin:
                return f"its {name} comes from {origin}, where this interpreter's sys.path finds {found or 'none'}"
    finally:
        sys.path[:] = saved
    return None


def _origin(name: str) -> str | None:
    """Where a top-level import of ``name`` would load it from now (without importing it)."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find(name, None) if find is not None else None
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            return spec.origin if spec.has_location else None
    return None


def loaded_files() -> dict[str, tuple[int, int, int]]:
    """Every file an imported module came from -> (mtime, size, ctime): ctime moves on any write,
    even one whose modification time was put back."""
    out = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            st = os.stat(path)
            out[path] = (st.st_mtime_ns, st.st_size, st.st_ctime_ns)
    return out


def changed(files: dict[str, tuple[int, int, int]]) -> str | None:
    """The first of ``files`` that changed (or went away) since it was recorded, or None."""
    for path, seen in files.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size, st.st_ctime_ns) != seen:
            return path
    return None


def home(create: bool = True) -> Path:
    """The folder of this user's servers: ``$RLBISECT_WARM_DIR``, else a private folder in
    ``$XDG_RUNTIME_DIR`` or the temporary folder. Refused unless it is this user's and mode 0700:
    whoever can write there could stand in for the server. A ``$RLBISECT_WARM_DIR`` that does not
    exist is refused, never made (a typo must not scatter folders)."""
    given = os.environ.get("RLBISECT_WARM_DIR")
    path = Path(given or os.path.join(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(),
                                      f"rlbisect-{os.getuid()}"))
    if given and not path.is_dir():
        raise WarmError(f"RLBISECT_WARM_DIR={given} is not a folder: create it (mode 0700) or unset it")
    if create:
        path.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WarmError(f"{path} must be a folder of this user's that no one else can open "
                        f"(mode {oct(st.st_mode & 0o777)}); set RLBISECT_WARM_DIR to another")
    return path


def user_socket(create: bool = True) -> Path:
    """The socket of this user's warm server: one per interpreter (each virtualenv has its own)."""
    return home(create) / f"warm-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}.sock"


def connect(path: Path) -> socket.socket | None:
    """A connection to the server at ``path``, or None when none answers there."""
    if not path.exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        return None
    return s


def answering(path: Path) -> bool:
    s = connect(path)
    if s is not None:
        s.close()
    return s is not None
