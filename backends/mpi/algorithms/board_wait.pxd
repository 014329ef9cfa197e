# Cython declarations augmenting board_wait.py (pure-Python mode; aluminum/core/compiled.py).

from cpython.exc cimport PyErr_CheckSignals
from aluminum.engine.direct cimport DirectCall

cdef extern from *:
    """
    #include <sched.h>
    #include <stddef.h>
    #include <time.h>

    /* The cell at ``address`` (an int64 on the arrival board). */
    static inline long long _al_cell(size_t address) {
        return __atomic_load_n((const long long *)address, __ATOMIC_ACQUIRE);
    }

    /* The count in the cell at ``address``. */
    static inline long long _al_count(size_t address) {
        return _al_cell(address) & ((1LL << 40) - 1);
    }

    /* Whether each of the ``n`` cells at the addresses listed at ``cells`` reached
       ``number`` or left its slot's generation listed at ``generations`` (a cell is
       generation << 40 | count: core/board_cells.py; acquire loads, so what a rank wrote
       before counting is visible after). */
    static inline int _al_all_reached(size_t cells, size_t generations, int n,
                                      long long number) {
        const size_t *at = (const size_t *)cells;
        const long long *generation = (const long long *)generations;
        long long cell;
        int i;
        for (i = 0; i < n; i++) {
            cell = _al_cell(at[i]);
            if ((cell & ((1LL << 40) - 1)) < number && (cell >> 40) == generation[i])
                return 0;
        }
        return 1;
    }

    /* Poll up to ``polls`` times, pausing between polls; whether every count reached
       ``number``. */
    static int _al_spin(size_t cells, size_t generations, int n, long long number,
                        int polls) {
        int i;
        for (i = 0; i < polls; i++) {
            if (_al_all_reached(cells, generations, n, number)) return 1;
    #if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
    #endif
        }
        return 0;
    }

    /* Without the GIL: poll, calling MPI_Iprobe(source, tag, comm) at ``probe`` (MPI's
       progress) and sched_yield between polls, until every count reached ``number`` (1),
       ``seconds`` passed (0), or the probe failed (-1, *code: its error code). */
    static int _al_wait_yielding(size_t cells, size_t generations, int n, long long number,
                                 size_t probe, int source, int tag, size_t comm,
                                 double seconds, int *code) {
        typedef int (*probe_t)(int, int, void *, int *, void *);
        size_t status[8];   /* an MPI_Status: 24 bytes in Open MPI */
        struct timespec start, now;
        int flag, polls, result = 0;
        Py_BEGIN_ALLOW_THREADS
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (polls = 1;; polls++) {
            if (_al_all_reached(cells, generations, n, number)) { result = 1; break; }
            *code = ((probe_t)probe)(source, tag, (void *)comm, &flag, status);
            if (*code) { result = -1; break; }
            sched_yield();
            if (polls % 64 == 0) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                if ((double)(now.tv_sec - start.tv_sec)
                        + 1e-9 * (double)(now.tv_nsec - start.tv_nsec) > seconds) break;
            }
        }
        Py_END_ALLOW_THREADS
        return result;
    }
    """
    long long _al_count(size_t address)
    int _al_spin(size_t cells, size_t generations, int n, long long number, int polls)
    int _al_wait_yielding(size_t cells, size_t generations, int n, long long number,
                          size_t probe, int source, int tag, size_t comm, double seconds,
                          int *code)


cdef class BoardWait(DirectCall):
    cdef size_t cells, generations, mine, probe, comm
    cdef int n, rank, source, tag
    cdef object held, mpi_comm, counts, generation_list
    cpdef call(self)
