# Cython declarations augmenting request.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.engine.completion cimport mark_done

cdef class Request:
    cdef public object state, key, _engine, queue, detail, _error, _event, _callbacks
    cdef public long long seq
    cdef public Py_ssize_t stage
    cdef public bint bounded, parked, stall_warned, on_stream, _done
    cdef object __weakref__
    cpdef bint _finish(self, error=*) except -1
    @staticmethod
    cdef made(state, engine, seq, key)
