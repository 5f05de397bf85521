"""TinyAgent's adapter with the chapter's seven faults as its matrix rows (for bench_probe.py):
`rlbisect check --matrix --adapter benchmarks/chapter_rows.py:make_adapter` is the 8-row matrix."""

from reference_trainer.adapter import make_adapter as reference_adapter
from reference_trainer.faults import CHAPTER


def make_adapter(**kwargs):
    adapter = reference_adapter(**kwargs)
    adapter.faults = list(CHAPTER)
    return adapter
