"""Extension points, all registered one way: a :class:`Registry` per kind of thing.

rlbisect has four places where code of yours can plug in, and each is a registry of named
entries, filled the same three ways:

    =============  ==========================================  ===============================
    registry       an entry is                                 entry-point group
    =============  ==========================================  ===============================
    PREDICATES     a predicate kind (``--predicate NAME``)     ``rlbisect.predicates``
    INVARIANTS     a check ``fn(ctx) -> (value, passed)``      ``rlbisect.invariants``
    REPLAYERS      ``fn(snapshot, bug) -> Replayed`` by the    ``rlbisect.replayers``
                   trainer name a snapshot records
    ADAPTERS       a trainer adapter factory (``--adapter``)   ``rlbisect.adapters``
    =============  ==========================================  ===============================

1. in code: ``@INVARIANTS.register("my check")`` above a function, or
   ``REPLAYERS.register("my_trainer", replay_fn)``;
2. by a ``"module:attr"`` string, imported only when the entry is used:
   ``ADAPTERS.register("mine", "my_pkg.rl_adapter:make_adapter")``;
3. by an installed package's entry point in the registry's group (``pyproject.toml``:
   ``[project.entry-points."rlbisect.replayers"] my_trainer = "my_pkg.replay:replay"``).

A name read from a data file (a snapshot's trainer, say) only ever *selects* a registered entry;
nothing names code to import from data. See ``docs/extending.md``.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterator, TypeVar, Union, cast, overload

T = TypeVar("T")


def resolve(target: str) -> object:
    """The object a ``"module:attr"`` string names (imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """Named entries of one kind, in registration order; rlbisect's own come first."""

    def __init__(self, kind: str, builtins: tuple[str, ...] = ()):
        self.kind = kind
        self.group = f"rlbisect.{kind}s"
        self._builtins = builtins          # modules whose import registers rlbisect's own entries
        self._entries: dict[str, Union[T, str]] = {}
        self._loaded = False

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, value: Union[T, str]) -> Union[T, str]: ...

    def register(self, name: str, value: Union[T, str, None] = None):
        """Add ``value`` (or, used as a decorator, the decorated object) under ``name``;
        a ``"module:attr"`` string is imported when the entry is first used."""
        if value is None:
            def decorate(obj: T) -> T:
                self._add(name, obj)
                return obj
            return decorate
        self._add(name, value)
        return value

    def _add(self, name: str, value: Union[T, str]) -> None:
        if name in self._entries and self._entries[name] is not value:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._entries[name] = value

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in self._builtins:
            importlib.import_module(module)
        from importlib.metadata import entry_points
        for ep in entry_points(group=self.group):
            self._entries.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unregister(self, name: str) -> None:
        """Remove an entry (a test's, or one to replace)."""
        self._load()
        del self._entries[name]

    def get(self, name: str) -> T:
        """The entry ``name`` (imported now if it was registered by name); KeyError if none."""
        self._load()
        value = self._entries[name]
        if isinstance(value, str):
            value = self._entries[name] = cast(T, resolve(value))
        return value

    def items(self) -> Iterator[tuple[str, T]]:
        for name in self.names():
            yield name, self.get(name)
