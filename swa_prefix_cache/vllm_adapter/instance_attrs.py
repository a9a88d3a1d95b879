"""Asking whether a vLLM object's method is its class's own, without
building the object's ``__dict__``.

CPython 3.11 and later keep an object's attributes as inline values until
something asks for its ``__dict__`` (``vars(obj)``, ``obj.__dict__``,
``PyObject_GenericGetDict``); from then on the object holds a real dict for
good, and every ``self.x`` of vLLM's own code on it is slower (about 15 ns
an access on 3.11, measured: a method reading three attributes went from 69
to 113 ns; CPython 3.13 builds the dict around the inline values and reads
stay fast). The pool, its hash map, the coordinator and the offloading
manager are read by vLLM at every scheduler step, so the plugin never asks
for their ``__dict__``: it reads attributes as vLLM's calls read them.
(Setting a new attribute name builds the dict too, once the class has made
about 28 objects: CPython 3.11-3.13 give a class's shared keys room for new
names that shrinks with every object made. A new name in those keys also
stops CPython from specializing method calls of that name on every object
of the class. So the lookup memory sets nothing on vLLM's map: it puts a
watching view in the pool's slot, lookup_memo.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def calls_own(obj: Any, name: str, fn: Any) -> bool:
    """``obj.name(...)`` calls ``fn`` (a function of ``obj``'s class) on
    ``obj``: neither the class nor the instance replaced it by anything
    else (an instance attribute holding that very bound method calls
    ``fn`` on ``obj`` too, and counts as its own). ``fn`` None: ``obj`` has
    no attribute ``name`` at all."""
    found = getattr(obj, name, None)
    if fn is None:
        return found is None
    return getattr(found, "__func__", None) is fn and getattr(found, "__self__", None) is obj


def all_own_checker(hotpath: Any) -> Callable[[Any, tuple[tuple[str, Any], ...]], bool]:
    """``all_own(obj, pairs)``: ``calls_own(obj, name, fn)`` for every
    ``(name, fn)`` of ``pairs``. With the extension (``hotpath``, or None
    for the python core) its ``calls_own`` answers, through CPython's own
    method lookup, with no bound method made per check (the KV-offload
    lookups check about twenty methods a tier lookup); it also requires the
    class to resolve ``name`` to ``fn``, which vLLM's own objects do."""
    if hotpath is not None:
        return hotpath.calls_own

    def all_own(obj: Any, pairs: tuple[tuple[str, Any], ...]) -> bool:
        for name, fn in pairs:
            if not calls_own(obj, name, fn):
                return False
        return True

    return all_own
