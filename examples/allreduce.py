"""Allreduce a vector across the ranks and report the result and the time it took.

Run with: python -m aluminum.run -n 2 examples/allreduce.py
"""
import time

import numpy as np

import aluminum as al

comm = al.MPICommunicator()
buf = np.arange(1 << 20, dtype=np.float32) * (comm.rank + 1)
expected = np.arange(1 << 20, dtype=np.float32) * (comm.size * (comm.size + 1) // 2)
al.allreduce(buf, comm)                      # warm-up
buf = np.arange(1 << 20, dtype=np.float32) * (comm.rank + 1)
comm.mpi_comm.Barrier()
start = time.perf_counter()
al.allreduce(buf, comm)
elapsed = time.perf_counter() - start
assert np.array_equal(buf, expected), "allreduce gave a wrong result"
if comm.rank == 0:
    print(f"allreduce of {buf.nbytes >> 20} MiB float32 over {comm.size} ranks: "
          f"sum correct (buf[1] = {buf[1]:g}), {elapsed * 1e3:.2f} ms")
al.finalize()
