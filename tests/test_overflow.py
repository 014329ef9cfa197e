"""Integer overflow wraps around however MPI was started (tests/mpi/rank_overflow.py covers
every algorithm and mode under ``aluminum.run``).

Open MPI's AVX op component saturates 8- and 16-bit integer sums of 16 elements or more.
``al.init`` keeps it out when it starts MPI; a program that started MPI itself, with the
component in, still gets wrapped sums from aluminum (and MPI's own op keeps its behaviour)."""
import os
import subprocess
import sys
import textwrap

from aluminum.launch import launch

USER_STARTS_MPI = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI          # the user's program starts MPI, before aluminum
    import aluminum as al

    al.init()
    comm = al.MPICommunicator()
    for dtype, value in ((np.uint8, 200), (np.int8, 100), (np.uint16, 60000),
                         (np.int16, -30000)):
        for algo in ["automatic", *al.algorithms("allreduce")]:
            for nonblocking in (False, True):
                buf = np.full(64, value, dtype)
                if nonblocking:
                    al.nonblocking_allreduce(buf, comm, algo=algo).wait()
                else:
                    al.allreduce(buf, comm, algo=algo)
                expected = np.array(value * comm.size, dtype=object)
                info = np.iinfo(dtype)
                expected = (expected - info.min) % (1 << (8 * buf.itemsize)) + info.min
                assert (buf == expected).all(), (dtype, algo, nonblocking, buf[0], expected)
    # MPI's own op is left as the user started it (saturating here).
    local = np.full(64, 200, np.uint8)
    MPI.SUM.Reduce_local(np.full(64, 200, np.uint8), local)
    print("wrapped; MPI's own uint8 sum:", local[0])
    al.finalize()
""")

ALUMINUM_STARTS_MPI = textwrap.dedent("""
    import numpy as np
    import aluminum as al

    al.init()                       # starts MPI
    from mpi4py import MPI

    operand, inout = np.full(64, 200, np.uint8), np.full(64, 200, np.uint8)
    MPI.SUM.Reduce_local(operand, inout)
    print("MPI's uint8 sum after al.init:", inout[0])
    al.finalize()
""")


def test_wraps_when_the_user_started_mpi_with_the_saturating_component(tmp_path):
    program = tmp_path / "user_starts_mpi.py"
    program.write_text(USER_STARTS_MPI)
    result = launch(2, [sys.executable, str(program)], timeout=120, capture=True,
                    env={**os.environ, "OMPI_MCA_op": "avx"})   # the component in, surely
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("wrapped; MPI's own uint8 sum: 255") == 2, result.stdout


def test_al_init_starts_mpi_without_the_saturating_component(tmp_path):
    """A singleton run, no launcher: the environment lacks OMPI_MCA_op."""
    program = tmp_path / "aluminum_starts_mpi.py"
    program.write_text(ALUMINUM_STARTS_MPI)
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_op"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run([sys.executable, str(program)], env=env, timeout=120,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MPI's uint8 sum after al.init: 144" in result.stdout, result.stdout
