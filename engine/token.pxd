# Cython declarations augmenting token.py (pure-Python mode; aluminum/core/compiled.py).

from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_release_lock, PyThread_type_lock)

cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                    int intr_flag) nogil

cdef class DriverToken:
    cdef PyThread_type_lock _lock
    cdef object _py
    cdef bint _held
    cpdef bint take(self)
    cpdef bint take_within(self, timeout) except -1
    cpdef give(self)
    cpdef bint held(self)
