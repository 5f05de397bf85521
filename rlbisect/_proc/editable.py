"""Your project installed editable (``pip install -e .``): each probe imports it from its checkout.

An editable install puts a folder of your working tree on the import path of an interpreter (a
``.pth`` line, or setuptools' finder with its ``MAPPING``). ``git bisect`` checks each commit out
in that tree, so the folder follows; rlbisect probes in checkouts of its own and never touches your
tree, so without this a ``src/`` layout's ``import mypkg`` would load your working tree at every
commit: every probe would test the same code. :func:`own_imports` finds those folders, statically
(the ``.pth`` files and finders are read as text, never run or imported), in the site-packages of
the interpreters a command may run: the command's own (``python ...``, or a script's ``#!``
line), ``python3`` and ``python`` on ``PATH``, and the repository's own ``.venv`` or ``venv``
(``uv run``, ``poetry run``). :func:`redirected` puts the checkout's same folders first on
``PYTHONPATH``, ahead of site-packages and of any finder; :func:`for_workers` does the same for
rlbisect's own workers, which run ``python -I``.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from rlbisect._proc.worker import IMPORTS_VAR


def own_imports(root: Path, argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The folders of the repository at ``root`` (relative, ``.`` for the top) that an editable
    install puts on the import path of the interpreters ``argv`` may run under ``env``."""
    top = Path(os.path.realpath(root))
    found: set[str] = set()
    local = [str(top / v / "bin" / "python") for v in (".venv", "venv") if (top / v / "bin" / "python").exists()]
    for site in _site_dirs(_interpreters(argv, env.get("PATH", "")) + local):
        for folder in _editable_folders(site):
            real = Path(os.path.realpath(folder))
            if real == top or top in real.parents:
                found.add(real.relative_to(top).as_posix() if real != top else ".")
    return tuple(sorted(found))


def outside_state(root: Path | None, argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A digest of the code editable installs read from outside the repository at ``root`` (a
    TRL clone installed ``-e``): every ``.py`` and extension file's path, size and mtime, so a
    checkout or an edit there between two bisects means fresh probes (its version does not move).
    At most :data:`MAX_FILES` files a folder (a ``.pth`` naming a home folder): then its own mtime.
    ``""`` when there is no such install."""
    top = Path(os.path.realpath(root)) if root is not None else None
    seen: list[str] = []
    for site in _site_dirs(_interpreters(argv, env.get("PATH", ""))):
        for folder in _editable_folders(site):
            real = Path(os.path.realpath(folder))
            if top is None or not (real == top or top in real.parents):
                seen.append(f"{real}\t{_folder_state(real)}")
    return hashlib.sha256("\n".join(sorted(set(seen))).encode()).hexdigest()[:16] if seen else ""


MAX_FILES = 20_000
_CODE = (".py", ".so", ".pyd")


def _folder_state(folder: Path) -> str:
    lines: list[str] = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
        for name in sorted(files):
            if name.endswith(_CODE):
                try:
                    st = os.stat(os.path.join(here, name))
                except OSError:
                    continue
                lines.append(f"{os.path.relpath(os.path.join(here, name), folder)} {st.st_size} {st.st_mtime_ns}")
                if len(lines) > MAX_FILES:
                    return f"mtime {folder.stat().st_mtime_ns}"
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16] if lines else "none"


def redirected(env: Mapping[str, str], worktree: Path, folders: Sequence[str]) -> dict[str, str]:
    """``env`` with ``worktree``'s ``folders`` first on ``PYTHONPATH`` (kept as given after them)."""
    if not folders:
        return dict(env)
    ours = [str(worktree) if f == "." else str(worktree / f) for f in folders]
    theirs = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(ours + theirs)}


def for_workers(env: Mapping[str, str], folders: Sequence[str]) -> dict[str, str]:
    """``env`` for rlbisect's own probe workers (``python -I``: no ``PYTHONPATH``), which put the
    checkout's ``folders`` on ``sys.path`` after the checkout itself (``IMPORTS_VAR``)."""
    return {**env, IMPORTS_VAR: os.pathsep.join(folders)} if folders else dict(env)


def note(root: Path, folders: Sequence[str]) -> str:
    """The line that tells the user their project's imports are redirected."""
    where = ", ".join(str(Path(root) / f) if f != "." else str(root) for f in folders)
    return (f"note: your project is installed editable ({where}): each probe imports it from its own "
            "checkout (first on its import path), not from your working tree")


def _interpreters(argv: Sequence[str], path: str) -> list[str]:
    """The interpreters a command may run: its own, then ``python3`` and ``python`` on ``path``."""
    found = []
    first = shutil.which(argv[0], path=path) if argv else None
    if first:
        if Path(first).name.startswith("python"):
            found.append(first)
        elif (shebang := _shebang(first)) is not None:
            found.append(shebang if os.path.isabs(shebang) else shutil.which(shebang, path=path) or "")
    found += [p for p in (shutil.which("python3", path=path), shutil.which("python", path=path)) if p]
    return [p for p in dict.fromkeys(found) if p]


def _shebang(script: str) -> str | None:
    """The Python a script's ``#!`` line names (``/usr/bin/env python3`` -> ``python3``), or None."""
    try:
        with open(script, "rb") as f:
            line = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    words = line[2:].split() if line.startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return words[0] if words and "python" in Path(words[0]).name else None


def _site_dirs(interpreters: Sequence[str]) -> list[str]:
    """Site-packages of each interpreter's prefix (a venv's or conda's ``bin/..``, not resolved:
    a venv's python is a link to the system's), and the user's own site-packages."""
    dirs: list[str] = []
    for exe in interpreters:
        prefix = Path(exe).parent.parent
        for lib in ("lib", "lib64"):
            dirs += sorted(glob.glob(str(prefix / lib / "python3*" / "site-packages")))
    dirs += sorted(glob.glob(os.path.expanduser("~/.local/lib/python3*/site-packages")))
    return list(dict.fromkeys(dirs))


def _editable_folders(site: str) -> Iterator[str]:
    """Folders a site-packages directory's ``.pth`` files put on the path, and the parent folders
    of the packages setuptools' editable finders map (``MAPPING = {name: path}``, read as a literal)."""
    for pth in sorted(glob.glob(os.path.join(site, "*.pth"))):
        try:
            lines = Path(pth).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in (ln.strip() for ln in lines):
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                for word in line.replace(";", " ").split():
                    if word.startswith("__editable__") and word.endswith("_finder"):
                        yield from _finder_folders(os.path.join(site, word.split(".")[0] + ".py"))
                continue
            yield os.path.join(site, line)


def _finder_folders(path: str) -> Iterator[str]:
    try:
        tree = ast.parse(Path(path).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:   # MAPPING: dict[str, str] = {...}
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in targets):
            try:
                mapping = ast.literal_eval(value)
            except ValueError:
                return
            for target in (mapping.values() if isinstance(mapping, dict) else ()):
                if isinstance(target, str):
                    yield str(Path(target).parent)
