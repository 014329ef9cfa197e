# Cython declarations augmenting progress.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.engine.request cimport Request
from aluminum.engine.scheduler cimport Scheduler

cdef class ProgressEngine(Scheduler):
    cdef public object name, core, _driver, _wake_lock, _thread, _start_lock
    cdef public bint _sleeping, _napping, _callers_drive, _stopping, _abandon, _closed
    cdef public bint _finished


cpdef wait_started_on(key)
