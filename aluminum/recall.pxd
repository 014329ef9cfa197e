# Cython declarations augmenting recall.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.arrivals cimport Arrivals
from aluminum.engine.progress cimport wait_started_on
from aluminum.plan cimport Plan

cdef extern from *:
    """
    /* The leading fields of numpy's PyArrayObject (numpy/ndarraytypes.h, PyArrayObject_fields:
       unchanged from numpy 1.7 through 2.x), read only for objects whose type is exactly
       numpy.ndarray. */
    typedef struct {
        PyObject_HEAD
        char *data;
        int nd;
        Py_ssize_t *dimensions;
        Py_ssize_t *strides;
        PyObject *base;
        PyObject *descr;
        int flags;
    } _al_ndarray_head;

    static inline int _al_array_unchanged(PyObject *a, PyObject *descr, PyObject *shape,
                                          int flags) {
        _al_ndarray_head *head = (_al_ndarray_head *)a;
        Py_ssize_t i, nd = PyTuple_GET_SIZE(shape);
        if (head->descr != descr || head->flags != flags || head->nd != nd) return 0;
        for (i = 0; i < nd; i++) {
            if (head->dimensions[i] != PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i))) return 0;
        }
        return 1;
    }

    static inline int _al_array_flags(PyObject *a) {
        return ((_al_ndarray_head *)a)->flags;
    }
    """
    bint _al_array_unchanged(object a, object descr, tuple shape, int flags)
    int _al_array_flags(object a)


cdef class _Entry:
    cdef public object first, comm, stream
    cdef public tuple options
    cdef public Plan plan
    cdef object a, b, a_dtype, a_shape, b_dtype, b_shape, general
    cdef int a_flags, b_flags, arity
    cpdef bint same(self, tuple objects)
    cdef bint same_pair(self, int count, object a, object b)


cdef dict _recent, _kinds


cpdef bint ran_known(op, int count, object a, object b, object comm, object stream, int k,
                     object o1, object o2, object o3)
cpdef started_known(op, int count, object a, object b, object comm, object stream, int k,
                    object o1, object o2, object o3)
cdef bint _first_remembered(list entries, object first)
cdef Plan _idle_repeat(_Entry entry, int count, object a, object b, object comm, object stream,
                       int k, object o1, object o2, object o3)
cdef object _known(op, int count, object a, object b, object comm, object stream, int k,
                   object o1, object o2, object o3, bint nonblocking)
cdef object _on_arrays(object call, tuple objects, tuple order)
cdef bint _differs(object x, object y)
cdef bint _differs_from(tuple options, int k, object o1, object o2, object o3)
cdef bint _unchanged(object a, object dtype, tuple shape, int flags)
cdef int _flags(object a)


cdef class _Kind:
    cdef public object comm, op, algo, nbytes, inplace, classes, template, buffers
    cdef public object positions, nested, direct, call_error, order, last, fresh, args
    cdef public Arrivals arrivals
    cpdef run(self, tuple objects)
    cpdef start(self, tuple objects)


cdef _kept(op, tuple objects, comm, stream, options, source=*)


cdef class _Context:
    cdef public object comm, stream, options, kinds
    cdef _Kind latest
    cdef object a_dtype, a_shape, b_dtype, b_shape
    cdef int pattern, a_flags, b_flags
    cpdef _Kind latest_of(self, tuple objects)
    cpdef note_latest(self, _Kind kind, tuple objects)
