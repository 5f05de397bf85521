"""Training runs as metric rows: read any trainer's log, map its names to ours, score each run.

A run is a list of rows, one per logged step, each a dict of numbers. They are read from

* JSON lines (``.jsonl``/``.json``/``.log``): one object per line; nested objects are flattened
  with ``/`` (``{"train": {"reward": 1}}`` -> ``train/reward``);
* CSV (``.csv``/``.tsv``): a header line, then one row per step; empty cells are "not logged";
* TensorBoard event files (a ``events.out.tfevents.*`` file, or a folder of them): scalars grouped
  by step, read with TensorBoard's own loader (``pip install 'rlbisect[tensorboard]'``).

Values that are not numbers (strings, lists) are dropped; ``NaN``/``Infinity`` are kept, since a
metric that became non-finite is evidence. A metric map renames a trainer's keys to ours
(``train/reward=reward``), so the held-out metric and the dashboard names line up with
:mod:`rlbisect.metrics`.

Scoring and judging the rows is :mod:`rlbisect.runs.judge`'s.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable

from rlbisect.errors import InputError

class RunLogError(InputError):
    """A metrics file that cannot be read as rows (the message names the file and line)."""


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def flatten(obj: dict, prefix: str = "") -> dict[str, float]:
    """A row's numbers, nested objects flattened with "/" (other values dropped)."""
    out: dict[str, float] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        elif (x := _number(value)) is not None:
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
                    by_step.setdefault(int(event.step), {"step": float(event.step)})[v.tag] = x
        except Exception as e:   # the loader's errors are its own: a corrupt record, a bad header
            raise RunLogError(f"{f}: not a readable TensorBoard event file ({type(e).__name__})") from None
    return [by_step[k] for k in sorted(by_step)]


def read_rows(path: str | Path) -> list[dict[str, float]]:
    """The rows of one run's metrics file: JSON lines, CSV or TensorBoard events, by name."""
    path = Path(path)
    if path.name.startswith("events.out.tfevents.") or path.is_dir():
        return _tensorboard_rows(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise RunLogError(f"{path}: {e.strerror or e}") from None
    if path.suffix.lower() in (".csv", ".tsv"):
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        return [{k: x for k, v in row.items() if k and (x := _number(v)) is not None} for row in reader]
    rows, lines = [], text.splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if i == len(lines):   # a run killed mid-write leaves at most one torn last line
                break
            raise RunLogError(f"{path}:{i}: not a JSON object per line (JSON lines or .csv expected)") from None
        if not isinstance(obj, dict):
            raise RunLogError(f"{path}:{i}: a JSON {type(obj).__name__}, not an object")
        rows.append(flatten(obj))
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
    """Rows with the trainer's keys renamed to ours (a key mapped onto an existing one wins)."""
    if not mapping:
        return rows
    return [{**{k: v for k, v in r.items() if k not in mapping},
             **{mapping[k]: v for k, v in r.items() if k in mapping}} for r in rows]
