# Cython declarations augmenting native_calls.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.engine.direct cimport DirectCall

cdef extern from *:
    """
    #include <stddef.h>
    #include <stdlib.h>
    #include <string.h>
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
        /* The nonblocking calls (MPI_I<op>): a blocking signature + 100, the same
           arguments, then the request (``status``) after the communicator. */
        case 100: return ((int (*)(ptr, ptr))f)(P(0), status);
        case 101: return ((int (*)(ptr, int, ptr, int, ptr, ptr))f)(
                    P(0), I(1), P(2), I(3), P(4), status);
        case 102: return ((int (*)(ptr, ptr, int, ptr, ptr, ptr, ptr))f)(
                    P(0), P(1), I(2), P(3), P(4), P(5), status);
        case 103: return ((int (*)(ptr, ptr, int, ptr, ptr, int, ptr, ptr))f)(
                    P(0), P(1), I(2), P(3), P(4), I(5), P(6), status);
        case 104: case 112: return ((int (*)(ptr, int, ptr, int, int, ptr, ptr))f)(
                    P(0), I(1), P(2), I(3), I(4), P(5), status);
        case 105: return ((int (*)(ptr, int, ptr, ptr, int, ptr, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), I(4), P(5), P(6), status);
        case 106: return ((int (*)(ptr, int, ptr, ptr, int, ptr, int, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), I(4), P(5), I(6), P(7), status);
        case 107: return ((int (*)(ptr, ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), P(5), status);
        case 108: return ((int (*)(ptr, int, ptr, ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), P(4), P(5), P(6), P(7), status);
        case 109: return ((int (*)(ptr, int, ptr, ptr, ptr, ptr, ptr, int, ptr, ptr))f)(
                    P(0), I(1), P(2), P(3), P(4), P(5), P(6), I(7), P(8), status);
        case 110: return ((int (*)(ptr, ptr, ptr, ptr, ptr, int, ptr, int, ptr, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), I(5), P(6), I(7), P(8), status);
        case 111: return ((int (*)(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr))f)(
                    P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8), status);
        }
        return -1;
    }

    /* MPI_Test(request, &flag, status) at address ``f``: the error code, *done the flag;
       ``status``: an MPI_Status (24 bytes in Open MPI). */
    static int _al_test(size_t f, void *request, int *done, void *status) {
        return ((int (*)(void *, int *, void *))f)(request, done, status);
    }

    /* MPI_Start(request) at address ``f``: the error code. */
    static int _al_start(size_t f, void *request) {
        return ((int (*)(void *))f)(request);
    }

    /* MPI_Wait(request, status) at address ``f``: the error code. */
    static int _al_wait(size_t f, void *request, void *status) {
        return ((int (*)(void *, void *))f)(request, status);
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

    /* Post an MPI_Irecv for each of ``n_recv`` receives, then an MPI_Isend for each of
       ``n_send`` sends (each four values at ``recvs`` / ``sends``: address, count, datatype,
       peer; ``f``: MPI_Irecv, MPI_Isend, MPI_Wait, MPI_Get_count), then wait for every one
       in that order, checking that each receive got its count. Returns 0; an MPI error
       code (the first; *failed: its message's index, receives first); -1 for a receive of
       another count (*failed: its index, *got: the count); -2 out of memory. */
    static int _al_exchange(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                            size_t send_specs, int tag, size_t comm, int *failed, int *got) {
        typedef int (*post_t)(void *, int, void *, int, int, void *, void *);
        const size_t *recvs = (const size_t *)recv_specs, *sends = (const size_t *)send_specs;
        int n = n_recv + n_send, i, code, first = 0;
        size_t status[8];   /* an MPI_Status: 24 bytes in Open MPI */
        size_t *requests = (size_t *)malloc(sizeof(size_t) * (n ? n : 1));
        if (!requests) return -2;
        for (i = 0; i < n; i++) {
            const size_t *m = i < n_recv ? recvs + 4 * i : sends + 4 * (i - n_recv);
            code = ((post_t)(i < n_recv ? f[0] : f[1]))(
                (void *)m[0], (int)m[1], (void *)m[2], (int)m[3], tag, (void *)comm,
                &requests[i]);
            if (code) { first = code; *failed = i; n = i; break; }  /* wait for the posted */
        }
        for (i = 0; i < n; i++) {
            code = ((int (*)(void *, void *))f[2])(&requests[i], status);
            if (code) {
                if (!first) { first = code; *failed = i; }
            } else if (i < n_recv && !first) {
                int count = -1;
                ((int (*)(void *, void *, int *))f[3])(status, (void *)recvs[4 * i + 2],
                                                       &count);
                if (count != (int)recvs[4 * i + 1]) { first = -1; *failed = i; *got = count; }
            }
        }
        free(requests);
        return first;
    }

    /* _al_exchange on new arrays: message ``i`` (receives first) on the numpy array
       ``arrays[which[i]]`` (a tuple the caller checked), the rest of each message as in
       ``recv_specs`` / ``send_specs``; without the GIL while MPI runs. */
    static int _al_exchange_arrays(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                                   size_t send_specs, PyObject *arrays, size_t which_address,
                                   int tag, size_t comm, int *failed, int *got) {
        const Py_ssize_t *which = (const Py_ssize_t *)which_address;
        int n = n_recv + n_send, i, code;
        size_t *copy = (size_t *)malloc(sizeof(size_t) * 4 * (n ? n : 1));
        if (!copy) return -2;
        memcpy(copy, (const size_t *)recv_specs, sizeof(size_t) * 4 * n_recv);
        memcpy(copy + 4 * n_recv, (const size_t *)send_specs, sizeof(size_t) * 4 * n_send);
        for (i = 0; i < n; i++)
            copy[4 * i] = _al_array_data(PyTuple_GET_ITEM(arrays, which[i]));
        Py_BEGIN_ALLOW_THREADS
        code = _al_exchange(f, n_recv, n_send, (size_t)copy, (size_t)(copy + 4 * n_recv), tag,
                            comm, failed, got);
        Py_END_ALLOW_THREADS
        free(copy);
        return code;
    }


    /* The nonblocking exchange: post what _al_exchange posts into ``requests`` (the specs
       as there, ``arrays``/``which`` as _al_exchange_arrays' where ``arrays`` is not NULL);
       where a post fails, wait for those posted and return its code (*failed: its index). */
    static int _al_exchange_post(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                                 size_t send_specs, PyObject *arrays, size_t which_address,
                                 int tag, size_t comm, size_t *requests, int *failed) {
        typedef int (*post_t)(void *, int, void *, int, int, void *, void *);
        const size_t *recvs = (const size_t *)recv_specs, *sends = (const size_t *)send_specs;
        const Py_ssize_t *which = (const Py_ssize_t *)which_address;
        size_t status[8];
        int n = n_recv + n_send, i, j, code;
        for (i = 0; i < n; i++) {
            const size_t *m = i < n_recv ? recvs + 4 * i : sends + 4 * (i - n_recv);
            size_t address = arrays != Py_None
                ? _al_array_data(PyTuple_GET_ITEM(arrays, which[i])) : m[0];
            code = ((post_t)(i < n_recv ? f[0] : f[1]))(
                (void *)address, (int)m[1], (void *)m[2], (int)m[3], tag, (void *)comm,
                &requests[i]);
            if (code) {
                *failed = i;
                for (j = 0; j < i; j++)
                    ((int (*)(void *, void *))f[2])(&requests[j], status);
                return code;
            }
        }
        return 0;
    }

    /* The arrays of an exchange request of ``n`` messages (0 where there is no memory). */
    static int _al_exchange_alloc(int n, size_t **requests, char **finished) {
        *requests = (size_t *)malloc(sizeof(size_t) * (n ? n : 1));
        *finished = (char *)calloc(n ? n : 1, 1);
        if (*requests && *finished) return 1;
        free(*requests); free(*finished);
        *requests = NULL; *finished = NULL;
        return 0;
    }
    static void _al_exchange_free(size_t *requests, char *finished) {
        free(requests); free(finished);
    }

    /* Test (``wait``: wait for) each of the ``n`` posted ``requests`` not ``finished``
       yet, marking those that complete and checking each receive's count; 0, an MPI error
       code (*failed: its index) or -1 for a receive of another count (*failed, *got). */
    static int _al_exchange_progress(const size_t *f, int n, int n_recv, size_t recv_specs,
                                     size_t *requests, char *finished, int *remaining,
                                     int wait, int *failed, int *got) {
        const size_t *recvs = (const size_t *)recv_specs;
        size_t status[8];
        int i, flag, code;
        for (i = 0; i < n; i++) {
            if (finished[i]) continue;
            flag = 1;
            code = wait ? ((int (*)(void *, void *))f[2])(&requests[i], status)
                        : ((int (*)(void *, int *, void *))f[4])(&requests[i], &flag, status);
            if (!code && !flag) continue;
            finished[i] = 1;
            (*remaining)--;
            if (code) { *failed = i; return code; }
            if (i < n_recv) {
                int count = -1;
                ((int (*)(void *, void *, int *))f[3])(status, (void *)recvs[4 * i + 2],
                                                       &count);
                if (count != (int)recvs[4 * i + 1]) { *failed = i; *got = count; return -1; }
            }
        }
        return 0;
    }
    """
    size_t _al_array_data(object a)
    int _al_mpi_call(int signature, size_t f, const size_t *v, void *status) nogil
    int _al_get_count(size_t f, void *status, size_t datatype) nogil
    int _al_test(size_t f, void *request, int *done, void *status) nogil
    int _al_wait(size_t f, void *request, void *status) nogil
    int _al_start(size_t f, void *request) nogil
    int _al_exchange(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                     size_t send_specs, int tag, size_t comm, int *failed, int *got) nogil
    int _al_exchange_arrays(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                            size_t send_specs, tuple arrays, size_t which_address, int tag,
                            size_t comm, int *failed, int *got)
    int _al_exchange_post(const size_t *f, int n_recv, int n_send, size_t recv_specs,
                          size_t send_specs, object arrays, size_t which_address, int tag,
                          size_t comm, size_t *requests, int *failed)
    int _al_exchange_alloc(int n, size_t **requests, char **finished)
    void _al_exchange_free(size_t *requests, char *finished)
    int _al_exchange_progress(const size_t *f, int n, int n_recv, size_t recv_specs,
                              size_t *requests, char *finished, int *remaining, int wait,
                              int *failed, int *got) nogil


cdef class NativeCall(DirectCall):
    cdef int signature, first_slot, second_slot
    cdef size_t function, test_function, wait_function
    cdef size_t values[12]
    cdef object held, on_error
    cdef long long expected
    cdef size_t get_count, count_type
    cdef public bint quick
    cdef _call(self, size_t first, int first_slot, size_t second, int second_slot)
    cpdef call(self)


cdef class NativeExchange(DirectCall):
    cdef size_t functions[5]
    cdef int n_recv, n_send, tag
    cdef size_t recv_specs, send_specs, comm
    cdef object held, on_error, which
    cdef size_t which_address
    cdef Py_ssize_t distinct
    cpdef call(self)


cdef class NativeRequest:
    cdef size_t handle, at, test_function, wait_function
    cdef object held
    cdef size_t status[8]
    cdef bint checks
    cdef public bint quick
    cdef size_t get_count, count_type
    cdef long long expected
    cdef object on_error
    cdef _check(self)


cdef class NativePersistent(NativeRequest):
    cdef size_t start_function


cdef class NativeExchangeRequest:
    cdef size_t *requests
    cdef char *finished
    cdef int n, n_recv, remaining
    cdef NativeExchange exchange
    cdef object arrays
    cdef _progress(self, int wait)
