# Cython declarations augmenting scheduler.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.engine.request cimport Request

cdef class Scheduler:
    cdef public object config, _inbox, _streams, _seq, _abandoned_owners
    cdef public Request _solo
    cdef public Py_ssize_t _queued, _bounded
    cdef public long long _completions, _last_seq
    cpdef bint _has_work(self)
    cpdef bint _step_alone(self, Request request) except -1
