# Cython declarations augmenting native_calls.py (pure-Python mode; aluminum/core/compiled.py).

cdef extern from *:
    """
    #include <stddef.h>
    /* MPI's C calls with their arguments as integers in C order (``v``): Open MPI's
       handles are pointers; int parameters take the low bits. One case per signature of
       native_calls.py's _SIGNATURES. */
    #define P(i) ((void *)v[i])
    #define I(i) ((int)v[i])
    typedef void *ptr;
    static int _al_mpi_call(int signature, size_t f, const size_t *v) {
        switch (signature) {
        case 0: return ((int (*)(ptr))f)(P(0));
        case 1: return ((int (*)(ptr, int, ptr, int, ptr))f)(P(0), I(1), P(2), I(3), P(4));
        case 2: return ((int (*)(ptr, ptr, int, ptr, ptr, ptr))f)(
                    P(0), P(1), I(2), P(3), P(4), P(5));
        case 3: return ((int (*)(ptr, ptr, int, ptr, ptr, int, ptr))f)(
                    P(0), P(1), I(2), P(3), P(4), I(5), P(6));
        case 4: return ((int (*)(ptr, int, ptr, int, int, ptr))f)(
                    P(0), I(1), P(2), I(3), I(4), P(5));
        case 5: return ((int (*)(ptr, int, ptr, ptr, int, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), I(4), P(5), P(6));
        case 6: return ((int (*)(ptr, int, ptr, ptr, int, ptr, int, ptr))f)(
                    P(0), I(1), P(2), P(3), I(4), P(5), I(6), P(7));
        case 7: return ((int (*)(ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), P(5));
        case 8: return ((int (*)(ptr, int, ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), P(4), P(5), P(6), P(7));
        case 9: return ((int (*)(ptr, int, ptr, ptr, ptr, ptr, ptr, int, ptr))f)(
                    P(0), I(1), P(2), P(3), P(4), P(5), P(6), I(7), P(8));
        case 10: return ((int (*)(ptr, ptr, ptr, ptr, ptr, int, ptr, int, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), I(5), P(6), I(7), P(8));
        case 11: return ((int (*)(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8));
        }
        return -1;
    }
    #undef P
    #undef I

    /* The data address of a numpy array (exactly numpy.ndarray): the first field after
       the object's head in numpy's PyArrayObject_fields, unchanged from 1.7 through 2.x. */
    typedef struct { PyObject_HEAD char *data; } _al_array_head;
    static inline size_t _al_array_data(PyObject *a) {
        return (size_t)((_al_array_head *)a)->data;
    }
    """
    size_t _al_array_data(object a)
    int _al_mpi_call(int signature, size_t f, const size_t *v) nogil


cdef class NativeCall:
    cdef int signature, first_slot, second_slot
    cdef size_t function
    cdef size_t values[9]
    cdef object held
    cdef _call(self, size_t first, int first_slot, size_t second, int second_slot)
