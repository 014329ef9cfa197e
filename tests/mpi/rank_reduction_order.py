"""One answer per call for floating-point reductions, whose bits depend on the order of the
operands on three ranks or more:

- every algorithm gives the same bits blocking, nonblocking and persistent (started, run);
  test_reduction_order.py adds: whatever AL_TIMEOUT or AL_DEBUG says;
- in deterministic mode (``al.set_deterministic``) every algorithm gives the bits of the
  rank-order reduction ``((x0 + x1) + x2) + ...``, computed here with numpy.

Sizes straddle the ones where Open MPI's MPI_Allreduce and MPI_Iallreduce differ on 3 ranks
(20000 float16: 40 KiB) and the shared_memory pipeline (more than 1 MiB of float32)."""
import numpy as np
import pytest

import aluminum as al
from backends import WAIT_S, settle

F16, BF16, F32 = np.dtype(np.float16), np.dtype(al.bfloat16), np.dtype(np.float32)
# (dtype, count): 20000 float16 is where Open MPI's two orders differ on 3 ranks; 300000
# float32 runs shared_memory's pipeline over two rounds.
SIZES = [(F16, 7), (F16, 20000), (BF16, 1000), (BF16, 20000), (F32, 1000), (F32, 20000),
         (F32, 300000)]
ORDERED = [(F16, 20000, al.SUM), (BF16, 1000, al.SUM), (F32, 7, al.AVG),
           (F32, 1000, al.PROD), (F16, 300000, al.SUM), (F32, 300000, al.SUM)]
FORMS = ["blocking", "nonblocking", "persistent start", "persistent run"]


def rank_values(count, dtype, rank, op):
    rng = np.random.default_rng(1000 * rank + count)
    if op is al.PROD:   # near 1: products neither vanish nor overflow
        return (1 + rng.uniform(-0.3, 0.3, count)).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def run(comm, form, algo, values, op):
    """The allreduce of ``values`` in ``form``, out of place; returns the result."""
    result = np.zeros_like(values)
    if form == "blocking":
        al.allreduce(values, comm, op=op, recvbuf=result, algo=algo)
        settle(comm)
    elif form == "nonblocking":
        al.nonblocking_allreduce(values, comm, op=op, recvbuf=result, algo=algo) \
            .wait(timeout=WAIT_S)
    else:
        with al.allreduce_init(values, comm, op=op, recvbuf=result, algo=algo) as plan:
            plan.start().wait(timeout=WAIT_S)
            if form == "persistent run":
                result[:] = 0
                plan.run()
                settle(comm)
    return result


def same_bits(a, b):
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.fixture
def deterministic():
    al.set_deterministic(True)
    yield
    al.set_deterministic(False)


@pytest.mark.parametrize("dtype, count", SIZES, ids=lambda v: str(v))
def test_every_form_of_an_algorithm_gives_its_blocking_bits(backend_comm, dtype, count):
    comm = backend_comm
    values = rank_values(count, dtype, comm.rank, al.SUM)
    differing = []
    for algo in al.algorithms("allreduce", comm=comm):
        blocking = run(comm, "blocking", algo, values, al.SUM)
        differing += [f"{algo} {form}" for form in FORMS[1:]
                      if not same_bits(run(comm, form, algo, values, al.SUM), blocking)]
    assert not differing, f"differ from the same algorithm's blocking call: {differing}"


@pytest.mark.parametrize("dtype, count, op", ORDERED, ids=lambda v: str(v))
def test_deterministic_mode_reduces_in_rank_order_everywhere(backend_comm, deterministic,
                                                             dtype, count, op):
    comm = backend_comm
    everyone = [rank_values(count, dtype, r, op) for r in range(comm.size)]
    expected = everyone[0].copy()
    for values in everyone[1:]:                 # ((x0 + x1) + x2) + ..., in the dtype
        expected = (expected * values) if op is al.PROD else (expected + values)
    if op is al.AVG and comm.size > 1:
        expected = expected / np.dtype(dtype).type(comm.size)
    wrong = [f"{algo} {form}"
             for algo in ["automatic", *al.algorithms("allreduce", comm=comm)]
             for form in FORMS
             if not same_bits(run(comm, form, algo, everyone[comm.rank], op), expected)]
    assert not wrong, f"not the rank-order bits: {wrong}"


def run_rooted(comm, form, op_name, values):
    """``al.reduce`` (root 0) or ``al.reduce_scatter`` of ``values`` in ``form``, out of
    place; returns what this rank received (None off the root of a reduce)."""
    if op_name == "reduce":
        result = np.zeros_like(values) if comm.rank == 0 else None
    else:
        result = np.zeros(values.size // comm.size, values.dtype)
    call = getattr(al, op_name)
    if form == "blocking":
        call(values, comm, recvbuf=result)
        settle(comm)
    elif form == "nonblocking":
        getattr(al, "nonblocking_" + op_name)(values, comm, recvbuf=result).wait(timeout=WAIT_S)
    else:
        with getattr(al, op_name + "_init")(values, comm, recvbuf=result) as plan:
            plan.start().wait(timeout=WAIT_S)
            if form == "persistent run":
                if result is not None:
                    result[:] = 0
                plan.run()
                settle(comm)
    return result


@pytest.mark.parametrize("op_name", ["reduce", "reduce_scatter"])
@pytest.mark.parametrize("dtype, count", [(F16, 7), (F16, 1000), (F32, 100000)],
                         ids=lambda v: str(v))
def test_reduce_and_reduce_scatter_give_one_answer_in_every_form(backend_comm, op_name,
                                                                 dtype, count):
    """MPI_Reduce and MPI_Ireduce differed on 3 ranks from 7 float16 up, MPI_Reduce_scatter
    _block and its nonblocking form at 100000 per rank."""
    comm = backend_comm
    values = rank_values(count * comm.size, dtype, comm.rank, al.SUM)
    blocking = run_rooted(comm, "blocking", op_name, values)
    others = {form: run_rooted(comm, form, op_name, values) for form in FORMS[1:]}
    differing = [form for form, result in others.items()
                 if blocking is not None and not same_bits(result, blocking)]
    assert not differing, f"{op_name} differs from its blocking call: {differing}"
