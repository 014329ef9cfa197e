# Cython declarations augmenting plan.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.arrivals cimport Arrivals
from aluminum.engine.direct cimport call_made
from aluminum.engine.progress cimport wait_started_on
from aluminum.engine.request cimport Request

cdef class Plan:
    cdef public object comm, op, algo, nbytes, args, inplace
    cdef public object _classes, _prepare, _run, _run_error, _start, _persistent, _request
    cdef public object _freed, _missing
    cdef public Arrivals _arrivals
    cdef object __weakref__
    cpdef run(self)
    cpdef start(self)
