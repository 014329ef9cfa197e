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
    static int _al_mpi_call(int signature, size_t f, const size_t *v, void *status) {
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
        /* The receiving calls: ``status`` after the communicator. */
        case 12: return ((int (*)(ptr, int, ptr, int, int, ptr, ptr))f)(
                    P(0), I(1), P(2), I(3), I(4), P(5), status);
        case 13: return ((int (*)(ptr, int, ptr, int, int, ptr, int, ptr, int, int, ptr,
                                  ptr))f)(
                    P(0), I(1), P(2), I(3), I(4), P(5), I(6), P(7), I(8), I(9), P(10),
                    status);
        case 14: return ((int (*)(ptr, int, ptr, int, int, int, int, ptr, ptr))f)(
                    P(0), I(1), P(2), I(3), I(4), I(5), I(6), P(7), status);
        }
        return -1;
    }
    #undef P
    #undef I

    /* MPI_Get_count(status, datatype, &count) at address ``f``; -1 where it failed. */
    static int _al_get_count(size_t f, void *status, size_t datatype) {
        int count = -1;
        if (((int (*)(void *, void *, int *))f)(status, (void *)datatype, &count) != 0)
            return -1;
        return count;
    }

    /* The data address of a numpy array (exactly numpy.ndarray): the first field after
       the object's head in numpy's PyArrayObject_fields, unchanged from 1.7 through 2.x. */
    typedef struct { PyObject_HEAD char *data; } _al_array_head;
    static inline size_t _al_array_data(PyObject *a) {
        return (size_t)((_al_array_head *)a)->data;
    }
    """
    size_t _al_array_data(object a)
    int _al_mpi_call(int signature, size_t f, const size_t *v, void *status) nogil
    int _al_get_count(size_t f, void *status, size_t datatype) nogil


cdef class NativeCall:
    cdef int signature, first_slot, second_slot
    cdef size_t function
    cdef size_t values[12]
    cdef object held, on_error
    cdef long long expected
    cdef size_t get_count, count_type
    cdef _call(self, size_t first, int first_slot, size_t second, int second_slot)
