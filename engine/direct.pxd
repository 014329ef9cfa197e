# Cython declarations augmenting direct.py (pure-Python mode; aluminum/core/compiled.py).

cdef class DirectCall:
    cpdef call(self)


cpdef call_made(made)
