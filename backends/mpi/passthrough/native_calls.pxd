# Cython declarations augmenting native_calls.py (pure-Python mode; aluminum/core/compiled.py).

cdef extern from *:
    """
    #include <stddef.h>
    /* MPI's C calls by the kinds of native_calls.py, handles and addresses as integers:
       Open MPI's handles are pointers. */
    typedef int (*al_barrier_t)(void *);
    typedef int (*al_bcast_t)(void *, int, void *, int, void *);
    typedef int (*al_allreduce_t)(const void *, void *, int, void *, void *, void *);
    typedef int (*al_reduce_t)(const void *, void *, int, void *, void *, int, void *);
    typedef int (*al_send_t)(const void *, int, void *, int, int, void *);
    typedef int (*al_allgather_t)(const void *, int, void *, void *, int, void *, void *);
    typedef int (*al_gather_t)(const void *, int, void *, void *, int, void *, int, void *);

    /* The data address of a numpy array (exactly numpy.ndarray): the first field after
       the object's head in numpy's PyArrayObject_fields, unchanged from 1.7 through 2.x. */
    typedef struct { PyObject_HEAD char *data; } _al_array_head;
    static inline size_t _al_array_data(PyObject *a) {
        return (size_t)((_al_array_head *)a)->data;
    }

    static int _al_mpi_call(int kind, size_t f, size_t comm, size_t a, size_t b,
                            long long count_a, long long count_b, size_t type_a,
                            size_t type_b, size_t op, long long root) {
        void *c = (void *)comm;
        switch (kind) {
        case 0: return ((al_barrier_t)f)(c);
        case 1: return ((al_bcast_t)f)((void *)a, (int)count_a, (void *)type_a, (int)root, c);
        case 2: return ((al_allreduce_t)f)((const void *)a, (void *)b, (int)count_a,
                                           (void *)type_a, (void *)op, c);
        case 3: return ((al_reduce_t)f)((const void *)a, (void *)b, (int)count_a,
                                        (void *)type_a, (void *)op, (int)root, c);
        case 4: return ((al_send_t)f)((const void *)a, (int)count_a, (void *)type_a,
                                      (int)root, (int)count_b, c);
        case 5: case 7:
            return ((al_allgather_t)f)((const void *)a, (int)count_a, (void *)type_a,
                                       (void *)b, (int)count_b, (void *)type_b, c);
        default:
            return ((al_gather_t)f)((const void *)a, (int)count_a, (void *)type_a,
                                    (void *)b, (int)count_b, (void *)type_b, (int)root, c);
        }
    }
    """
    size_t _al_array_data(object a)
    int _al_mpi_call(int kind, size_t f, size_t comm, size_t a, size_t b,
                     long long count_a, long long count_b, size_t type_a, size_t type_b,
                     size_t op, long long root) nogil


cdef class NativeCall:
    cdef int kind
    cdef size_t function, comm, a, b, type_a, type_b, op
    cdef long long count_a, count_b, root
    cdef object held
    cdef public int first
