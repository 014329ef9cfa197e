"""Soak: does tracing keep memory bounded?  RSS growth over many traced operations.

``AL_TRACE=/tmp/soak.json python -m aluminum.run -n 2 bench/soak_trace.py [--ops 100000]
[--count 8] [--report-every 20000]``

Each rank runs ``--ops`` allreduces (float32, ``--count`` elements) on one communicator,
alternating blocking calls and nonblocking ones waited for at once, after a warm-up of 1,000
(the first calls build plans, the engine thread, the trace file's buffer, and fill the
flight recorder's ring, which then stays the same size).  It prints its resident set size
(``/proc/self/statm``, what the process holds now) and its peak (``ru_maxrss``) at the
start, every ``--report-every`` operations and at the end, then the growth of both (and of
the RSS counted from before the warm-up): issue
20 asks for under 20 MB over 100,000 operations with ``AL_TRACE`` on.  Without ``AL_TRACE``
it still runs (the flight recorder off), as the baseline.  Exit status 1 if some rank grew
``--limit-mb`` (default 20) or more.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

import aluminum as al

WARMUP_OPS = 1000


def rss_kib() -> int:
    """The resident set size now, in KiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_ops(buf: np.ndarray, comm, ops: int) -> None:
    for i in range(ops):
        if i % 2:
            al.nonblocking_allreduce(buf, comm).wait()
        else:
            al.allreduce(buf, comm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--report-every", type=int, default=20_000)
    parser.add_argument("--limit-mb", type=float, default=20.0)
    args = parser.parse_args()

    comm = al.MPICommunicator()
    buf = np.ones(args.count, np.float32)
    before_warmup = rss_kib()
    run_ops(buf, comm, WARMUP_OPS)
    start_rss, start_peak, started = rss_kib(), peak_kib(), time.monotonic()
    tag = f"rank {comm.rank}: AL_TRACE={os.environ.get('AL_TRACE', '(unset)')}"
    print(f"{tag}: start rss {start_rss} KiB, peak {start_peak} KiB", flush=True)
    done = 0
    while done < args.ops:
        batch = min(args.report_every, args.ops - done)
        run_ops(buf, comm, batch)
        done += batch
        print(f"{tag}: {done} ops, rss +{rss_kib() - start_rss} KiB, "
              f"peak +{peak_kib() - start_peak} KiB", flush=True)
    grown_mb = (rss_kib() - start_rss) / 1024
    peak_mb = (peak_kib() - start_peak) / 1024
    print(f"{tag}: {args.ops} ops in {time.monotonic() - started:.1f} s: RSS grew "
          f"{grown_mb:.2f} MB (peak {peak_mb:.2f} MB; {(rss_kib() - before_warmup) / 1024:.2f} "
          f"MB counting the warm-up); limit {args.limit_mb:g} MB", flush=True)
    al.finalize()
    return 0 if max(grown_mb, peak_mb) < args.limit_mb else 1


if __name__ == "__main__":
    sys.exit(main())
