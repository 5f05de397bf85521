"""Loading an adapter: `MODULE:FACTORY`, `FILE.py:FACTORY` or a registered name -> the adapter its
factory builds, and what a failure means: a spec that names nothing (:class:`AdapterNotFound`, bad
input) or an adapter that does not fit this code (:class:`AdapterUnfit`, "could not run": git
bisect run's skip)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from rlbisect.errors import CannotRun, ExitCode, InputError, describe
from rlbisect.registry import Registry


class AdapterError(InputError):
    """An adapter that cannot be loaded or built; the message is one line."""


class AdapterNotFound(AdapterError):
    """The spec names nothing: no such file, module, factory or registered name (exit 2; inside a
    bisect the CLI makes it a skip: the commit predates the adapter)."""


class AdapterUnfit(AdapterError, CannotRun):
    """The adapter is there but does not fit this code: it or what it imports fails to import, its
    factory refuses an option, raises, or returns no adapter (exit 125, git bisect run's skip)."""

    exit_code = ExitCode.CANNOT_RUN


class OptionRefused(AdapterUnfit):
    """An option given for the adapter that it does not take: its factory has no such keyword, or
    the factory's own ``check_options`` refuses it (TinyAgent's: a fault, setting or size it does
    not know). A skip to a bisect (this commit's adapter may predate the option); by hand the CLI
    makes it bad input."""


def _first(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _import_file(path: Path):
    """A FILE.py adapter: as part of its package if it is in one, else standalone."""
    path = path.resolve()
    package = path.parent
    while (package / "__init__.py").is_file():
        package = package.parent
    if package != path.parent:   # in a package: import it by its dotted name, from its root
        _first(package)
        dotted = ".".join(path.relative_to(package).with_suffix("").parts)
        return importlib.import_module(dotted)
    # standalone: one module per file and process, so a second load (a --matrix row) does not
    # run the file again and stack whatever it patches
    mod_name = "_rlbisect_adapter_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    mod_spec = importlib.util.spec_from_file_location(mod_name, path)
    if mod_spec is None or mod_spec.loader is None:   # a .py path always has both
        raise AdapterError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    _first(path.parent)
    sys.modules[mod_name] = module
    try:
        mod_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return module


def _import_target(spec: str):
    if ":" not in spec:
        if spec in ADAPTERS:
            try:
                return ADAPTERS.get(spec)
            except Exception as e:   # rlbisect's own entry: the framework it needs does not import here
                raise AdapterUnfit(f"adapter {spec!r}: {type(e).__name__}: {e}"[:600]) from None
        raise AdapterError(f"adapter spec {spec!r} must be MODULE:FACTORY, FILE.py:FACTORY or one of "
                           f"{', '.join(ADAPTERS)}")
    where, name = spec.rsplit(":", 1)
    if not where.strip() or not name.strip():      # import_module("") raised, read as "does not fit"
        raise AdapterError(f"adapter spec {spec!r}: the {'module or file' if not where.strip() else 'factory'} "
                           "is empty (expected MODULE:FACTORY or FILE.py:FACTORY)")
    try:
        if where.endswith(".py"):
            if not Path(where).is_file():
                raise AdapterNotFound(f"adapter file {where} does not exist")
            module = _import_file(Path(where))
        else:
            _first(Path.cwd())   # as `python -m` would: a module in the current folder is found
            module = importlib.import_module(where)
    except AdapterError:
        raise
    except (Exception, SystemExit) as e:   # the user's module failed to import: say which and why, in one line
        own = isinstance(e, ModuleNotFoundError) and e.name and f"{where}.".startswith(f"{e.name}.")
        kind = AdapterNotFound if own else AdapterUnfit      # not there at all, or there and broken
        if own and Path(where).is_dir():
            raise _a_folder(where, name) from None
        raise kind(f"cannot import {where}: {_why(e)}"[:600]) from None
    factory = getattr(module, name, None)
    if not callable(factory):
        # a folder without __init__.py imports as an empty namespace package: it names no factory
        raise _a_folder(where, name) if Path(where).is_dir() else AdapterNotFound(f"{where} has no callable {name!r}")
    return factory


def _why(error: BaseException) -> str:
    """What a failed import or factory raised, in one line. A SystemExit (a script's ``sys.exit()``,
    argparse on arguments meant for another program) is the adapter's failure too: left to
    propagate it ended rlbisect with the adapter's exit status and no word (exit 0 for
    ``sys.exit(0)``)."""
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r})"
    return f"{type(error).__name__}: {error}"


def _a_folder(where: str, name: str) -> AdapterNotFound:
    return AdapterNotFound(f"adapter {where} is a folder, not a module with {name!r}: give the file "
                           f"that defines it, e.g. {where.rstrip('/')}/my_adapter.py:{name}")


def load_adapter(spec: str, require: Optional[Sequence[str]] = None, defaults: Optional[dict] = None,
                 **options) -> Any:
    """Build an adapter from `MODULE:FACTORY`, `FILE.py:FACTORY` or a name registered in
    :data:`ADAPTERS`, passing the options it accepts; it must have the methods in ``require``
    (the checks' probe points by default; ``("replay",)`` is all ``rlbisect replay`` needs).
    `MODULE:FACTORY` is found from the current folder first (as `python -m` would); a FILE.py in a
    package is imported as part of it, so relative imports work; a FILE.py on its own runs with its
    folder first on `sys.path`. Each file is imported once per process.

    An option the factory does not accept is an error when it was set (not None): silently
    ignoring `--bug` would check the wrong thing. One left unset (None) reaches only a factory that
    names it, never its ``**kwargs``. ``defaults``: the command's own defaults (not given by the
    user), passed only to a factory that takes them: a factory with no options is still buildable.
    """
    from rlbisect.check.adapter import REQUIRED
    factory = _import_target(spec)
    kwargs = _kwargs(spec, factory, defaults, options)
    try:
        adapter = factory(**kwargs)
    except CannotRun:
        raise
    except (Exception, SystemExit) as e:
        raise AdapterUnfit(f"{spec} failed: {_why(e)}"[:600]) from None
    missing = [m for m in (REQUIRED if require is None else require) if not callable(getattr(adapter, m, None))]
    if missing:
        raise AdapterUnfit(f"{spec} returned an adapter without {', '.join(missing)}")
    return adapter


def _kwargs(spec: str, factory: Callable, defaults: Optional[dict], options: dict) -> dict:
    """What the factory is called with (see :func:`load_adapter`)."""
    params = {name: p for name, p in inspect.signature(factory).parameters.items()
              if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    takes_all = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())
    kwargs = {key: value for key, value in (defaults or {}).items() if key in params or takes_all}
    for key, value in options.items():
        if key in params:
            kwargs[key] = value
        elif value is None:
            continue        # not given: a **kwargs factory that forwards it (to GRPOConfig) fails on it
        elif takes_all:
            kwargs[key] = value
        else:
            raise OptionRefused(f"{spec} does not accept option {key!r}")
    return kwargs


def check_options(spec: str, defaults: Optional[dict] = None, **options) -> None:
    """The options :func:`load_adapter` would pass, checked before anything is built: a keyword
    the factory lacks, then the factory's own ``check_options(**kwargs)`` when it offers one
    (TinyAgent's does: its fault names, settings, probe size). What either refuses is
    :class:`OptionRefused`, so by hand a mistyped option is told from a trainer that cannot be
    built at this commit (a ValueError of the factory itself stays AdapterUnfit)."""
    factory = _import_target(spec)
    kwargs = _kwargs(spec, factory, defaults, options)
    check = getattr(factory, "check_options", None)
    if callable(check):
        try:
            check(**kwargs)
        except (ValueError, TypeError) as e:       # a pydantic ValidationError is a ValueError
            raise OptionRefused(f"{spec}: {describe(e)}") from None


DEFAULT_ADAPTER = "reference_trainer.adapter:make_adapter"
#: Adapter factories by name (``--adapter NAME``); see rlbisect.registry.
ADAPTERS: Registry[Callable[..., Any]] = Registry("adapter")
ADAPTERS.register("tinyagent", DEFAULT_ADAPTER)
ADAPTERS.register("trl-demo", "rlbisect.frameworks.trl:demo")
ADAPTERS.register("verl-demo", "rlbisect.frameworks.verl:demo")


def parse_adapter_opts(pairs: list[str] | None, flags: dict[str, str] | None = None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (``--adapter-opt``) -> factory keyword arguments; a value that reads as
    JSON (a number, true/false, null, a list) is passed as that, anything else as a string.
    ``flags``: the factory arguments the command sets itself, each with its flag: given here too,
    the factory got it twice and raised."""
    import json
    flags = flags or {}
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip().isidentifier():
            raise AdapterError(f"--adapter-opt {pair!r}: expected KEY=VALUE, e.g. temperature=0.7")
        if key.strip() in flags:
            by = flags[key.strip()]
            raise AdapterError(f"--adapter-opt {pair!r}: {key.strip()} is set by {by}"
                               + ("; give it there" if by.startswith("--") else ", not by --adapter-opt"))
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out
