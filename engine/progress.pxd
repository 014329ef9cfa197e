# Cython declarations augmenting progress.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.engine.request cimport Request
from aluminum.engine.scheduler cimport Scheduler
from aluminum.engine.token cimport DriverToken

cdef class ProgressEngine(Scheduler):
    cdef public object name, core, _wake_lock, _thread, _start_lock
    cdef public DriverToken _driver
    cdef public bint _sleeping, _napping, _callers_drive, _stopping, _abandon, _closed
    cdef public bint _finished


cpdef wait_started_on(key)


cdef ProgressEngine _engine   # (the process's engine, or None: read in C on every call)
