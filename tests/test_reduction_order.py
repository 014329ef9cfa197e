"""No AL_* diagnostic setting changes a reduction's bits (tests/mpi/rank_reduction_order.py
checks the forms and deterministic mode within one job).

``AL_TIMEOUT`` sends blocking calls through the engine (so that a stuck one can be ended),
where the MPI passthrough used to run ``MPI_Iallreduce`` instead of ``MPI_Allreduce``: on 3
ranks Open MPI reduces 40 KiB of float16 in another order there.  The same program runs on 3
ranks with no setting, AL_TIMEOUT, AL_DEBUG and AL_TRACE, and prints a digest of every
algorithm's results in every form, with deterministic mode off and on; all must agree."""
import hashlib
import os
import re
import sys
import textwrap

import pytest

import aluminum as al
from aluminum.launch import launch

PROGRAM = textwrap.dedent("""
    import hashlib
    import numpy as np
    import aluminum as al

    comm = al.MPICommunicator()
    for deterministic in (False, True):
        al.set_deterministic(deterministic)
        for dtype, count in ((np.float16, 20000), (al.bfloat16, 1000), (np.float32, 70000)):
            values = np.random.default_rng(comm.rank).standard_normal(count).astype(dtype)
            for algo in al.algorithms("allreduce"):
                digest = hashlib.sha256()
                for form in ("blocking", "nonblocking", "persistent"):
                    result = values.copy()
                    if form == "blocking":
                        al.allreduce(result, comm, algo=algo)
                    elif form == "nonblocking":
                        al.nonblocking_allreduce(result, comm, algo=algo).wait()
                    else:
                        with al.allreduce_init(result, comm, algo=algo) as plan:
                            plan.start().wait()
                    digest.update(result.tobytes())
                print(f"DIGEST rank={comm.rank} deterministic={deterministic} "
                      f"{np.dtype(dtype).name}x{count} {algo} {digest.hexdigest()[:16]}",
                      flush=True)
    comm.free()
""")

SETTINGS = {"none": {}, "AL_TIMEOUT": {"AL_TIMEOUT": "60"}, "AL_DEBUG": {"AL_DEBUG": "1"},
            "AL_TRACE": {"AL_TRACE": "{tmp}/trace.json"}}


def digests(tmp_path, extra):
    program = tmp_path / "digest.py"
    program.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items()
           if k not in ("AL_TIMEOUT", "AL_DEBUG", "AL_TRACE", "AL_DETERMINISTIC")}
    env.update({k: v.format(tmp=tmp_path) for k, v in extra.items()})
    result = launch(3, [sys.executable, str(program)], timeout=180, env=env, capture=True)
    assert result.returncode == 0, result.stdout
    lines = sorted(re.findall(r"DIGEST .*", result.stdout))
    algorithms = len(al.algorithms("allreduce"))
    assert len(lines) == 3 * 2 * 3 * algorithms, result.stdout   # ranks, modes, dtypes
    return lines


def test_no_al_setting_changes_the_bits_of_any_algorithm(tmp_path):
    found = {name: digests(tmp_path, extra) for name, extra in SETTINGS.items()}
    for name, lines in found.items():
        differing = sorted(set(lines) ^ set(found["none"]))
        assert not differing, f"{name} changes results: {differing}"
