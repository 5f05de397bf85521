"""What a probe process pays before and after its work, and how rlbisect avoids paying it.

Measured on 2 cores (``benchmarks/bench_probe.py``): importing torch takes about 1 s, and the
first optimizer another 1 s, because eager torch code reaches into ``torch._dynamo`` only to say
"do not compile this": ``Optimizer.add_param_group`` and friends are wrapped by
``torch._disable_dynamo``, and every optimizer's ``step`` calls ``torch._dynamo.graph_break()``.
Either imports all of ``torch._dynamo`` (sympy, fx, the inductor registrations). Interpreter exit
then tears down every module torch loaded.

- :func:`defer_dynamo` gives those wrappers stand-ins that do what torch's do for as long as
  ``torch._dynamo`` is not loaded, and hand over to torch's own the moment it is. Nothing can be
  compiling before it is loaded (``torch.compile`` loads it), and outside compilation "do not
  compile" and ``graph_break`` do nothing: the same eager kernels run, the same numbers come out
  (tests/_proc/test_startup.py). Only functions torch has loaded are touched, and nothing is put in
  ``sys.modules``: whoever imports ``torch._dynamo`` gets the real one, when it asks.
- :func:`exit_now` ends rlbisect's processes (the CLI, probe workers) without that teardown.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import types
import warnings
from typing import Any, Callable, Protocol, cast

_DYNAMO = "torch._dynamo"


def defer_dynamo() -> int:
    """Put the stand-ins in place (before the first optimizer is built) -> how many."""
    if _DYNAMO in sys.modules:
        return 0
    try:
        import torch._compile
        from torch.optim import optimizer
        codes = (torch._compile._disable_dynamo(lambda: None).__code__,
                 optimizer._use_grad_for_differentiable(lambda self: None).__code__)
    except (ImportError, AttributeError):    # a torch without these wrappers: nothing to defer
        return 0
    done = 0
    with warnings.catch_warnings():     # touching deprecated aliases warns
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            # a module done before (a check forked from the warm server) holds no new wrappers
            if module is not None and (name == "torch" or name.startswith("torch.")) and name not in _DONE:
                done += _defer_in(module, codes, _CLASSES)
                _DONE.add(name)
    return done


_DONE: set[str] = set()        # torch modules whose wrappers have stand-ins
_CLASSES: set[type] = set()


def _defer_in(module: types.ModuleType, codes: tuple, classes: set) -> int:
    disable, use_grad = codes
    done = 0
    for value in list(vars(module).values()):      # vars(): getattr on some torch modules initialises devices
        owner = value if isinstance(value, type) and value not in classes else None
        if owner is not None:
            classes.add(owner)
        for attr, fn in (list(vars(owner).items()) if owner is not None else [(None, value)]):
            if not isinstance(fn, types.FunctionType):
                continue
            if fn.__code__ is use_grad and owner is not None:
                setattr(owner, cast(str, attr), _eager_step(cast(_TorchWrapped, fn)))
                done += 1
            # torch's disable wrapper, or one a wrapper holds (the optimizers' functional forms)
            done += sum(_seed(g) for g in (fn, *_held(fn)) if g.__code__ is disable)
    return done


def _held(fn: types.FunctionType) -> list[types.FunctionType]:
    out = []
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:          # a cell not filled yet
            continue
        if isinstance(value, types.FunctionType):
            out.append(value)
    return out


def _seed(wrapper: types.FunctionType) -> int:
    """``torch._disable_dynamo`` caches the disabled function as ``fn.__dynamo_disable``."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or ()))
    fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
    if getattr(fn, "__dynamo_disable", None) is not None:
        return 0
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def until_dynamo(*args, **kwargs):
        if not disabled and _DYNAMO not in sys.modules:
            return fn(*args, **kwargs)              # nothing is compiling: nothing to disable
        if not disabled:
            disabled.append(sys.modules[_DYNAMO].disable(fn, recursive, wrapping=False))
        return disabled[0](*args, **kwargs)
    setattr(fn, "__dynamo_disable", until_dynamo)
    return 1


class _TorchWrapped(Protocol):
    """An optimizer's ``step`` as torch wraps it (``functools.wraps``)."""
    __wrapped__: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def _eager_step(torch_step: _TorchWrapped) -> Callable[..., Any]:
    """An optimizer's ``step`` as torch wraps it, minus the graph breaks while nothing compiles."""
    import torch
    step = torch_step.__wrapped__

    @functools.wraps(step)
    def eager_step(*args, **kwargs):
        if _DYNAMO in sys.modules:
            return torch_step(*args, **kwargs)
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(args[0].defaults["differentiable"])
            return step(*args, **kwargs)
        finally:
            torch.set_grad_enabled(previous)
    return eager_step


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
