"""What several commands share: output paths checked before any work, seeds, options models."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence, overload

from pydantic import ValidationError

from rlbisect.bisect.options import BisectOptions
from rlbisect.errors import InputError


def doc(model, name: str) -> str:
    """An option's help: the description of the config field it sets (documented once)."""
    return model.model_fields[name].description or ""


#: what a figure may be saved as (matplotlib's writers that need nothing more installed)
FIGURES = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff")


@overload
def output_path(path: str, flag: str, figure: bool = False) -> Path: ...
@overload
def output_path(path: str | None, flag: str, figure: bool = False) -> Path | None: ...


def output_path(path: str | None, flag: str, figure: bool = False) -> Path | None:
    """A file we will write: it must be writable now, before any work (a typo costs nothing).
    An existing file is opened for appending, which writes nothing but fails where a write
    would (``/proc/version``, a read-only file); a new one must have a writable folder. A
    ``figure`` needs an extension matplotlib writes (it raised only after the work)."""
    if path is None:
        return None
    p = Path(path).expanduser()
    if p.is_dir():
        raise InputError(f"{flag} {path}: is a directory, give a file name")
    if not p.parent.is_dir():
        raise InputError(f"{flag} {path}: folder {p.parent} does not exist")
    if figure and p.suffix.lower() not in FIGURES:
        raise InputError(f"{flag} {path}: a figure needs one of the extensions {' '.join(FIGURES)}")
    try:
        if p.exists():
            with open(p, "a"):
                pass
        elif not os.access(p.parent, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write it ({e.strerror or e})") from None
    return p


def folder_path(path: str | None, flag: str) -> Path | None:
    """A folder we will create or fill: refused now if a file (or a file's child) holds its name."""
    if path is None:
        return None
    p = Path(path).expanduser()
    if (clash := next((q for q in (p, *p.parents) if q.exists() and not q.is_dir()), None)) is not None:
        raise InputError(f"{flag} {path}: {clash} is a file, not a folder")
    return p


def finite(**numbers: float | None) -> None:
    """Refuse an option that is NaN or infinite (``finite(lr=...)`` names ``--lr``): typer's float
    options take ``inf`` and ``nan``, and ``min=`` bounds let both through, so the work would run
    on them and its NaN read as the trainer's fault."""
    for name, value in numbers.items():
        if value is not None and not math.isfinite(value):
            raise InputError(f"--{name.replace('_', '-')}: Input should be a finite number")


def given_adapter(spec: str | None) -> str | None:
    """``--adapter`` as given, None when left out. An empty one (``--adapter "$UNSET"``) is
    refused: read as left out, it checked or replayed TinyAgent in place of the user's trainer."""
    if spec is not None and not spec.strip():
        raise InputError("--adapter is empty: give MODULE:FACTORY, FILE.py:FACTORY or a registered "
                         "adapter (leave it out for TinyAgent)")
    return spec


def json_text(obj: Any) -> str:
    """JSON as other tools read it: a NaN or an infinity (a run that diverged, a crash read as the
    worst outcome) becomes null; Python's json writes them bare, which no JSON parser accepts."""
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        return [clean(v) for v in x] if isinstance(x, (list, tuple)) else x
    return json.dumps(clean(obj), indent=2, allow_nan=False)


def distinct(outputs: dict[str, Path | None], inputs: Sequence[str] = ()) -> dict[str, Path | None]:
    """One command's output files by flag, refused when two flags name one file (the second
    written would replace the first: a --json lost under a --report) or when one names an input
    (a run file ``compare`` reads, lost under its own judgement)."""
    seen: dict[Path, str] = {Path(f).resolve(): "an input" for f in inputs}
    for flag, p in outputs.items():
        if p is not None and (other := seen.setdefault(p.resolve(), flag)) != flag:
            raise InputError(f"{flag} names {p}, which is an input: it would be overwritten" if other == "an input"
                             else f"{other} and {flag} name the same file {p}: one would overwrite the other")
    return outputs


def probe_seed_list(seed: int | None, probe_seeds: str | None) -> list[int]:
    """--seed N or --probe-seeds A,B,C (not both) -> the probe seeds, default [1]."""
    if probe_seeds is None:
        return [1 if seed is None else seed]
    if seed is not None:
        raise InputError("give --seed or --probe-seeds, not both")
    try:
        seeds = [int(x) for x in probe_seeds.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--probe-seeds {probe_seeds}: expected integers, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"--probe-seeds {probe_seeds}: give distinct seeds, e.g. 1,2,3")
    return seeds


def bisect_options(**given) -> BisectOptions:
    """:class:`~rlbisect.bisect.options.BisectOptions` from the flags; a value pydantic refuses is one line, exit 2."""
    try:
        return BisectOptions(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        flag = f"--{str(err['loc'][0]).replace('_', '-')}: " if err["loc"] else ""
        raise InputError(f"{flag}{err['msg'].removeprefix('Value error, ')}") from None
