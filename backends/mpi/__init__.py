"""The MPI backend: host buffers, every operation over mpi4py, plus custom algorithms.

backend.py registers the ``"mpi"`` backend (its operations: passthrough/ and algorithms/);
services.py registers the MPI services (backends/services.py) every backend's communicators
are built with today.  This package imports neither: importing ``mpi4py.MPI`` starts MPI,
and the services must set how first (``al.init``).
"""
