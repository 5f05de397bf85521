"""What a probe process pays before and after its work, and how rlbisect avoids paying it.

Measured on 2 cores (``benchmarks/bench_probe.py``): importing torch takes about 1 s, and the
first optimizer another 1 s, because eager torch code reaches into ``torch._dynamo`` only to say
"do not compile this": ``Optimizer.add_param_group`` and friends are wrapped by
``torch._disable_dynamo``, and every ``Optimizer.step`` calls ``torch._dynamo.graph_break()``.
Either imports all of ``torch._dynamo`` (sympy, fx, the inductor registrations). Interpreter exit
then tears down every module torch loaded.

- :func:`defer_dynamo` puts a placeholder in ``sys.modules["torch._dynamo"]`` that answers those
  two calls the way dynamo does outside compilation (``graph_break`` does nothing; ``disable``
  returns the function, which runs unchanged) and swaps in the real package the moment anything
  else is asked of it (any other attribute, any submodule import). Nothing can be compiling
  before the real package is loaded, because ``torch.compile`` asks it for more than those two;
  so eager code runs the same kernels and gives the same numbers (tests/test_startup.py).
- :func:`exit_now` ends rlbisect's processes (the CLI, probe workers) without that teardown.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.abc
import os
import sys
import threading
import types

_NAME = "torch._dynamo"
_lock = threading.RLock()


class _DynamoUntilUsed(types.ModuleType):
    """Stands in for ``torch._dynamo`` until something needs more than its two eager no-ops."""

    @staticmethod
    def graph_break(msg: str = "") -> None:
        """Outside compilation dynamo's own graph_break does nothing either."""

    @staticmethod
    def disable(fn=None, recursive: bool = True, **kwargs):
        if fn is None:
            return functools.partial(_DynamoUntilUsed.disable, recursive=recursive, **kwargs)

        disabled = []

        @functools.wraps(fn)
        def until_dynamo(*args, **kw):
            if disabled:
                return disabled[0](*args, **kw)
            real = sys.modules.get(_NAME)
            if real is None or isinstance(real, _DynamoUntilUsed):
                return fn(*args, **kw)       # nothing is compiling: "disable" has nothing to do
            disabled.append(real.disable(fn, recursive, **kwargs))
            return disabled[0](*args, **kw)
        return until_dynamo

    def __getattr__(self, name: str):
        return getattr(_materialize(), name)


class _Finder(importlib.abc.MetaPathFinder):
    """A submodule import (``torch._dynamo.config``) needs the real package first."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(_NAME + ".") and isinstance(sys.modules.get(_NAME), _DynamoUntilUsed):
            _materialize()
        return None


def _materialize() -> types.ModuleType:
    with _lock:
        module = sys.modules.get(_NAME)
        if isinstance(module, _DynamoUntilUsed):
            del sys.modules[_NAME]
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
            module = importlib.import_module(_NAME)     # also rebinds torch._dynamo
        return module


def defer_dynamo() -> bool:
    """Install the placeholder (once, before anything has imported ``torch._dynamo``) -> whether
    it is in place. For rlbisect's own probe processes and ``rlbisect check``: they never compile."""
    import torch
    with _lock:
        if _NAME in sys.modules:
            return isinstance(sys.modules[_NAME], _DynamoUntilUsed)
        placeholder = _DynamoUntilUsed(_NAME, "placeholder until torch._dynamo is needed (rlbisect.startup)")
        sys.modules[_NAME] = placeholder
        torch._dynamo = placeholder
        sys.meta_path.insert(0, _Finder())
        return True


def exit_now(code: int) -> None:
    """Leave as Python would, less the part that only frees memory: wait for non-daemon threads,
    run the atexit handlers (temporary folders, log handlers, child processes), flush, and then
    skip the module-by-module teardown the OS makes pointless."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
