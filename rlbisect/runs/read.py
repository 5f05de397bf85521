"""Training runs as metric rows: read any trainer's log, map its names to ours.

A run is a list of rows, one per logged step, each a dict of numbers. They are read from

* JSON lines (``.jsonl``/``.json``/``.log``): one object per line; nested objects are flattened
  with ``/`` (``{"train": {"reward": 1}}`` -> ``train/reward``); verl's file logger's
  ``{"step": N, "data": {...}}`` is read as the step's values;
* CSV (``.csv``/``.tsv``): a header line, then one row per step; empty cells are "not logged";
* TensorBoard event files (a ``events.out.tfevents.*`` file, or a folder of them): scalars grouped
  by step, read with TensorBoard's own loader (``pip install 'rlbisect[tensorboard]'``).

A value that is not a finite number is evidence, never dropped: ``NaN`` and ``Infinity`` stay what
they are, and ``null`` (how orjson writes NaN), a string, a boolean or a list becomes an
:class:`Odd`: a NaN that remembers what it was, so the judge can say "reward is a string from
step 5 on". Numbers beyond :data:`LIMIT` in size are infinite for the judge. Limits keep a hostile
or broken file from costing memory or a traceback: a line longer than :data:`MAX_LINE` bytes or an
object nested deeper than :data:`MAX_DEPTH` is a one-line :class:`RunLogError` (exit 2), and files
are read line by line. Names other trainers log for our metrics (:data:`rlbisect.metrics.FOREIGN`:
verl's ``critic/score/mean`` is ``reward``) are read as ours too; a metric map renames a trainer's
keys to ours (``train/reward=reward``).

Scoring and judging the rows is :mod:`rlbisect.runs.judge`'s.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Iterable, Iterator

from rlbisect.errors import InputError, printable
from rlbisect.metrics import ALIASES

#: Longest line read from a metrics file (bytes); a longer one is an error, not a memory bill.
MAX_LINE = 1 << 20
#: Deepest nesting of a row's objects.
MAX_DEPTH = 32
#: Beyond this size a number counts as infinite: the statistics stay finite (and exact) below it.
LIMIT = 1e150


class RunLogError(InputError):
    """A metrics file that cannot be read as rows (the message names the file and line)."""


class Odd(float):
    """A value that is not a number, kept as NaN with what it was (``what``) for the judge's words."""

    what: str

    def __new__(cls, what: str) -> "Odd":
        self = super().__new__(cls, math.nan)
        self.what = what
        return self


def number(value: object) -> float | None:
    """A logged value as the judge sees it; None for "not logged" (an empty CSV cell)."""
    if isinstance(value, Odd):     # read already (rows flattened twice): keep what it was
        return value
    if isinstance(value, bool):
        return Odd(f"a boolean ({str(value).lower()})")
    if isinstance(value, int) and abs(value) > LIMIT:   # float() of a 400-digit int raises
        return math.inf if value > 0 else -math.inf
    if isinstance(value, (int, float)):
        x = float(value)
        return math.copysign(math.inf, x) if abs(x) > LIMIT and math.isfinite(x) else x
    if value is None:
        return Odd("null")
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return number(float(value))
        except ValueError:
            return Odd(f"a string ({printable(repr(value[:40]))})")
    return Odd(f"a {type(value).__name__}")


def json_line(row: dict) -> str:
    """A row as one line of strict JSON that :func:`read_rows` reads back as it was: a NaN or an
    infinity is written as the string "NaN", "Infinity" or "-Infinity" (Python's json writes them
    bare, which jq, JavaScript and most JSON readers refuse)."""
    def strict(v: object) -> object:
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
        return {k: strict(x) for k, x in v.items()} if isinstance(v, dict) else v
    return json.dumps(strict(row), allow_nan=False)


def flatten(obj: dict, prefix: str = "", depth: int = 0) -> dict[str, float]:
    """A row's values, nested objects flattened with "/" (see :func:`number`)."""
    if depth > MAX_DEPTH:
        raise RunLogError(f"objects nested deeper than {MAX_DEPTH} levels")
    out: dict[str, float] = {}
    for key, value in obj.items():
        name = printable(f"{prefix}{key}")
        if isinstance(value, dict):
            out.update(flatten(value, name + "/", depth + 1))
        elif (x := number(value)) is not None:
            out[name] = x
    return out


def _tensorboard_rows(path: Path) -> list[dict[str, float]]:
    """Scalars of a run's event file(s), one row per step (steps in order)."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        raise RunLogError(f"{path}: reading TensorBoard event files needs the tensorboard package: "
                          "pip install 'rlbisect[tensorboard]'") from None
    files = sorted(path.glob("events.out.tfevents.*")) if path.is_dir() else [path]
    if not files:
        raise RunLogError(f"{path}: no events.out.tfevents.* file in this folder")
    by_step: dict[int, dict[str, float]] = {}
    for f in files:
        try:
            for event in EventFileLoader(str(f)).Load():
                for v in event.summary.value:
                    if v.WhichOneof("value") == "simple_value":
                        x = float(v.simple_value)
                    elif v.HasField("tensor") and (arr := make_ndarray(v.tensor)).size == 1 \
                            and arr.dtype.kind in "fiub":
                        x = float(arr.reshape(()))
                    else:
                        continue   # histograms, images, text: not a metric row
                    row = by_step.setdefault(int(event.step), {"step": float(event.step)})
                    row[printable(v.tag)] = number(x) or 0.0
        except Exception as e:   # the loader's errors are its own: a corrupt record, a bad header
            raise RunLogError(f"{f}: not a readable TensorBoard event file ({type(e).__name__})") from None
    return [by_step[k] for k in sorted(by_step)]


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(number, text, is the last line) of a text file, each at most :data:`MAX_LINE` bytes."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise RunLogError(f"{path}: {e.strerror or e}") from None
    with f:
        i, line = 0, f.readline(MAX_LINE + 1)
        while line:
            i += 1
            if len(line) > MAX_LINE:
                raise RunLogError(f"{path}:{i}: a line longer than {MAX_LINE} bytes")
            nxt = f.readline(MAX_LINE + 1)
            # a byte-order mark (PowerShell's and Excel's UTF-8) is not part of the first key
            yield i, line.decode("utf-8-sig" if i == 1 else "utf-8", errors="replace"), not nxt
            line = nxt


def read_rows(path: str | Path) -> list[dict[str, float]]:
    """The rows of one run's metrics file: JSON lines, CSV or TensorBoard events, by name."""
    path = Path(path)
    if path.name.startswith("events.out.tfevents.") or path.is_dir():
        return _tensorboard_rows(path)
    if path.suffix.lower() in (".csv", ".tsv"):
        text = "".join(line for _, line, _ in _lines(path))
        header = text.partition("\n")[0]
        # a spreadsheet in a locale with decimal commas separates cells with semicolons
        sep = "\t" if path.suffix.lower() == ".tsv" else ";" if ";" in header and "," not in header else ","
        reader = csv.DictReader(io.StringIO(text), delimiter=sep)
        # a row shorter than the header leaves its last cells None: not logged, as an empty cell
        return [{printable(k): x for k, v in row.items() if k and v is not None and (x := number(v)) is not None}
                for row in reader]
    rows: list[dict[str, float]] = []
    for i, line, last in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except RecursionError:
            raise RunLogError(f"{path}:{i}: nested deeper than JSON can be read") from None
        except ValueError:
            if last and rows:   # a run killed mid-write leaves at most one torn last line
                break
            raise RunLogError(f"{path}:{i}: not a JSON object per line (JSON lines or .csv expected)") from None
        if not isinstance(obj, dict):
            raise RunLogError(f"{path}:{i}: a JSON {type(obj).__name__}, not an object")
        if obj.keys() == {"step", "data"} and isinstance(obj["data"], dict):   # verl's file logger
            obj = {"step": obj["step"], **obj["data"]}
        try:
            rows.append(flatten(obj))
        except RunLogError as e:
            raise RunLogError(f"{path}:{i}: {e}") from None
    return rows


def parse_metric_map(specs: Iterable[str]) -> dict[str, str]:
    """``THEIRS=OURS`` pairs (comma-separated or repeated), or a JSON file ``{"theirs": "ours"}``."""
    out: dict[str, str] = {}
    for spec in specs:
        if spec.endswith(".json") and "=" not in spec:
            try:
                loaded = json.loads(Path(spec).read_text())
            except (OSError, ValueError) as e:
                raise InputError(f"--metric-map {spec}: {e}") from None
            if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
                raise InputError(f"--metric-map {spec}: expected a JSON object of name -> name")
            out.update(loaded)
            continue
        for pair in filter(None, (p.strip() for p in spec.split(","))):
            theirs, eq, ours = pair.partition("=")
            if not eq or not theirs.strip() or not ours.strip():
                raise InputError(f"--metric-map {pair!r}: expected THEIRS=OURS, e.g. train/reward=reward")
            out[theirs.strip()] = ours.strip()
    return out


def rename(rows: list[dict[str, float]], mapping: dict[str, str]) -> list[dict[str, float]]:
    """Rows with the trainer's keys renamed to ours (a key mapped onto an existing one wins), and
    other trainers' names for our metrics (:data:`FOREIGN`) also under ours where a row lacks them."""
    rows = [{**r, **{ours: r[theirs] for theirs, ours in ALIASES.items() if theirs in r and ours not in r}}
            for r in rows]
    if not mapping:
        return rows
    return [{**{k: v for k, v in r.items() if k not in mapping},
             **{mapping[k]: v for k, v in r.items() if k in mapping}} for r in rows]

