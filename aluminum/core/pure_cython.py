"""What the compiled modules (``compiled.MODULES``) use of Cython's pure-Python mode, for
running them uncompiled where Cython is not installed (it is needed only to build them).

Compiled, ``import cython`` is Cython's own; uncompiled with Cython installed, its shadow
module; otherwise this one: the decorators change nothing and ``compiled`` is False.
Annotations such as ``cython.bint`` are never evaluated (the modules import annotations
from ``__future__``)."""
from __future__ import annotations

compiled = False
bint, int, double = bool, int, float


def cclass(cls):
    """A class Cython compiles as an extension type; here the class itself."""
    return cls


def locals(**types):   # noqa: A001  (Cython's name)
    """The C types of a function's locals; here the function itself."""
    return lambda function: function


def cfunc(function):
    """A C function (here: the function itself)."""
    return function
