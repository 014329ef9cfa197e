"""Benchmarks: OSU-style sweeps, peer comparison, the tuner and the α-β model.

``python -m aluminum.bench --help`` lists the commands (``__main__.py``). Modules:

- ``sizes``: ``--sizes 4:64MiB`` parsing and size formatting;
- ``ops``: per operation, the buffer layout, the nccl-tests bus-bandwidth factor and our call;
- ``peers``: the same points run with raw mpi4py and with torch.distributed (gloo);
- ``sweep``: the timing loop (warmup, untimed barrier, slowest rank per iteration);
- ``report``: the rank-0 table, JSON (``aluminum-bench/1``) and CSV;
- ``plot``: ``--plot out.png`` (matplotlib, optional);
- ``tune``: measure every algorithm, write the selector's table (``aluminum-tuning/1``);
- ``model``: predicted times per algorithm and crossover sizes from the α-β model.
"""
