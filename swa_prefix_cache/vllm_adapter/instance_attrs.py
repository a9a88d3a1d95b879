"""Asking whether a vLLM object's method is its class's own, without
building the object's ``__dict__``.

CPython 3.11 and later keep an object's attributes as inline values until
something asks for its ``__dict__`` (``vars(obj)``, ``obj.__dict__``,
``PyObject_GenericGetDict``); from then on the object holds a real dict for
good, and every ``self.x`` of vLLM's own code on it is slower (about 15 ns
an access on 3.11, measured: a method reading three attributes went from 69
to 113 ns). The pool, its hash map, the coordinator and the offloading
manager are read by vLLM at every scheduler step, so the plugin never asks
for their ``__dict__``: it reads attributes as vLLM's calls read them.
(Setting an attribute the class's shared keys have no room for builds the
dict too: the lookup memory's watch on a pool's map does, while it
remembers an answer; lookup_memo.py.)
"""

from __future__ import annotations

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
