# Cython declarations augmenting token.py (pure-Python mode; aluminum/core/compiled.py).

from cpython.exc cimport PyErr_CheckSignals
from posix.unistd cimport usleep

cdef class DriverToken:
    cdef object _py
    cdef bint _held
    cpdef bint take(self)
    cpdef bint take_within(self, timeout) except -1
    cpdef give(self)
    cpdef bint held(self)
