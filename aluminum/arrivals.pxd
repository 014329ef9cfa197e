# Cython declarations augmenting arrivals.py (pure-Python mode; aluminum/core/compiled.py).

cdef class Arrivals:
    cdef public long long count
    cdef public object _mine
    cdef long long _inside_number
    cdef object _inside_plan
    cdef long long[::1] _counts
    cdef public Py_ssize_t _slot
    cdef long long _base
    cdef object __weakref__
    cpdef long long arrive(self) except? -1
    cpdef long long enter(self, plan) except? -1
    cpdef leave(self)
