"""Allreduce: every rank ends with the element-wise reduction of every rank's buffer."""
from __future__ import annotations

import weakref

import numpy as np

from . import dispatch
from .core import trace
from .core.buffers import array_or_tensor, contiguous_host_buffer, torch_host_views
from .core.reduction import ReductionOp
from .plan import Plan
from .validate import (check_comm, check_stream, expect_count, input_buffer, output_buffer,
                       reduction_op, same_or_disjoint)

__all__ = ["allreduce", "nonblocking_allreduce", "allreduce_init"]

# (backend, comm size, dtype, count, op, algo, in place, blocking) -> (State class,
# ReductionOp, array runner or None, array state maker or None) for calls on numpy arrays (or
# CPU torch tensors, through numpy views of them) that already passed validation once: a
# repeat call skips the selector and the argument parsing, which otherwise cost several times
# a small MPI allreduce itself.  States with an ``array_state`` (passthrough, shared_memory)
# also skip making Buffers, blocking and nonblocking (``_array_plans``).
_plans: dict = {}
dispatch.plan_caches.append(_plans)
# blocking (True/False) -> the last such call whose plan works on arrays: (weak references
# to its communicator and arrays, op, algo, dtype, plan).  The same call again (the same
# objects: a training loop's buffers) skips even the plan lookup; what numpy lets users change
# on an existing array (its writability, strides and dtype) is checked again.
_last_call: dict = {}
dispatch.plan_caches.append(_last_call)


def allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
              algo: str = "automatic") -> None:
    """Reduce ``buf`` element-wise across all ranks of ``comm``; every rank gets the result.

    In place (the result overwrites ``buf``) unless ``recvbuf`` is given, in which case ``buf``
    is only read and ``recvbuf`` (same count and dtype) receives the result.  Every rank gets
    bit-identical results.  On stream-bound backends the call returns once the work is
    enqueued on ``stream`` (default: the communicator's); on the MPI backend it returns when
    the result is in place.
    """
    if stream is None:
        plan = _same_as_last(True, buf, recvbuf, comm, op, algo)
        if plan is None:
            plan, buf, recvbuf = _repeat_call(True, buf, recvbuf, comm, op, algo)
        if plan is not None:
            if plan[2] is not None:
                plan[2](comm, buf, recvbuf)
            else:
                send, recv = _buffers(buf, None if recvbuf is buf else recvbuf)
                plan[0].run_blocking(comm, None, send, recv, plan[1])
            return
    _allreduce(True, buf, comm, stream, op, recvbuf, algo).run()


def nonblocking_allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                          algo: str = "automatic"):
    """Start ``allreduce`` and return a ``Request``; buffers must not be touched until it
    completes (``req.wait()`` or ``req.test()``)."""
    if stream is None:
        plan = _same_as_last(False, buf, recvbuf, comm, op, algo)
        if plan is None:
            plan, buf, recvbuf = _repeat_call(False, buf, recvbuf, comm, op, algo)
        if plan is not None:
            if plan[3] is not None:
                return dispatch.submit(plan[3](comm, buf, recvbuf))
            send, recv = _buffers(buf, None if recvbuf is buf else recvbuf)
            return dispatch.submit(plan[0](comm, None, send, recv, plan[1]))
    return _allreduce(False, buf, comm, stream, op, recvbuf, algo).start()


def allreduce_init(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                   algo: str = "automatic") -> Plan:
    """Validate ``allreduce`` once; return its persistent ``Plan`` (``start()`` runs it
    nonblocking, ``run()`` blocking, always on the buffers given here).  On the MPI backend
    the library's own algorithm runs as an MPI-4 persistent collective
    (``MPI_Allreduce_init``), the fastest way to repeat a small allreduce."""
    return _allreduce(None, buf, comm, stream, op, recvbuf, algo).prepare()


def _repeat_call(blocking, buf, recvbuf, comm, op, algo):
    """``(plan, buf, recvbuf)`` for a call ``_same_as_last`` did not recognise: its cached
    plan (None: the full path) and the arrays to run it on, numpy views standing in for CPU
    torch tensors.  A plan that works on the caller's own arrays is remembered as the last
    blocking (or nonblocking) call; views, made for this call only, are not."""
    views = torch_host_views(buf, recvbuf)
    if views is not None:
        plan = _repeat_plan(blocking, *views, comm, op, algo)
        return (None, buf, recvbuf) if plan is None else (plan, *views)
    plan = _repeat_plan(blocking, buf, recvbuf, comm, op, algo)
    if plan is not None and plan[2 if blocking else 3] is not None:
        recv_ref = None if recvbuf is None else weakref.ref(recvbuf)
        _last_call[blocking] = (weakref.ref(comm), weakref.ref(buf), recv_ref, op, algo,
                                buf.dtype, plan)
    return plan, buf, recvbuf


def _same_as_last(blocking, buf, recvbuf, comm, op, algo):
    """The plan of the last blocking (or nonblocking) call if this one repeats it, else
    None."""
    last = _last_call.get(blocking)
    if last is None:
        return None
    last_comm, last_buf, last_recv, last_op, last_algo, dtype, plan = last
    # (a weak reference whose object is gone returns None: never a match for None arguments)
    if comm is None or buf is None or last_comm() is not comm or last_buf() is not buf \
            or last_op is not op or last_algo is not algo or buf.dtype is not dtype \
            or comm._mpi is None:
        return None
    if recvbuf is None:
        if last_recv is not None:
            return None
        flags = buf.flags
        return plan if flags.writeable and flags.c_contiguous else None
    if last_recv is None or last_recv() is not recvbuf or recvbuf.dtype is not dtype:
        return None
    flags = recvbuf.flags
    if flags.writeable and flags.c_contiguous and buf.flags.c_contiguous:
        return plan
    return None


def _repeat_plan(blocking, buf, recvbuf, comm, op, algo):
    """The cached ``(State class, ReductionOp, array runner, array state maker)`` (the last
    two None for states without them) for a repeat call on numpy arrays whose checks are
    cheap to redo, else None (the full path validates and explains)."""
    if type(buf) is not np.ndarray:
        return None
    if recvbuf is None or recvbuf is buf:
        flags = buf.flags
        if not (flags.c_contiguous and flags.writeable):
            return None
        inplace = True
    else:
        # Equal dtypes that are distinct objects take the full path.
        if type(recvbuf) is not np.ndarray or recvbuf.dtype is not buf.dtype \
                or recvbuf.size != buf.size:
            return None
        out_flags = recvbuf.flags
        if not (out_flags.c_contiguous and out_flags.writeable and buf.flags.c_contiguous):
            return None
        # Two arrays that each own their memory are two allocations: disjoint, no need to
        # ask numpy (a third of this path's cost).
        if (buf.base is not None or recvbuf.base is not None) \
                and np.may_share_memory(buf, recvbuf):
            return None
        inplace = False
    try:
        plan = _plans.get((comm.backend, comm.size, buf.dtype, buf.size, op, algo, inplace,
                           blocking))
    except (AttributeError, TypeError):   # not a communicator, unhashable op: full path
        return None
    if plan is None or comm._mpi is None:
        return None
    return plan


def _buffers(buf, recvbuf):
    """Send and receive Buffers of arrays ``_repeat_plan`` accepted (``recvbuf`` None: in
    place)."""
    if recvbuf is None:
        send = recv = contiguous_host_buffer(buf, buf, True)
    else:
        send = contiguous_host_buffer(buf, buf, buf.flags.writeable)
        recv = contiguous_host_buffer(recvbuf, recvbuf, True)
    return send, recv


def _allreduce(blocking, buf, comm, stream, op, recvbuf, algo) -> Plan:
    """The validated Plan of a call (``blocking`` None: a persistent plan); remembers, for
    calls on arrays, what ``_repeat_plan`` needs to skip validation next time."""
    comm = check_comm(comm)
    raw_op, inplace = op, recvbuf is None
    if inplace:
        sendbuf = recvbuf = output_buffer(buf, comm, "buf")
    else:
        sendbuf = input_buffer(buf, comm, "buf")
        recvbuf = output_buffer(recvbuf, comm, "recvbuf")
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
        if same_or_disjoint(sendbuf, recvbuf):
            sendbuf = recvbuf
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    plan = Plan(comm, "allreduce", algo, recvbuf.nbytes, (stream, sendbuf, recvbuf, op),
                inplace=sendbuf is recvbuf)
    if blocking is not None and stream is None and array_or_tensor(buf) \
            and array_or_tensor(recvbuf.obj) and not trace.ENABLED \
            and not dispatch.checks_enabled():
        state_class = plan.state_class(not blocking)
        # Keyed as _repeat_plan looks up: by the numpy array (or tensor view) dtype and size.
        dispatch.remember(_plans, (comm.backend, comm.size, recvbuf.dtype, recvbuf.count,
                                   raw_op, algo, sendbuf is recvbuf, blocking),
                          (state_class, op, *_array_plans(state_class, op, sendbuf.dtype)))
    return plan


def _array_plans(state_class, op, dtype):
    """``(runner, maker)`` for repeat calls on arrays, each None for a state class without an
    ``array_state``.  ``maker = state_class.array_state(op, dtype)`` builds unstarted states
    from arrays; the runner is ``state_class.array_runner(op, dtype)`` where the class has a
    direct blocking call (passthrough), else it drives a made state on the calling thread,
    as ``run_blocking`` does with a state built from Buffers."""
    make_state = getattr(state_class, "array_state", None)
    if make_state is None:
        return None, None
    maker = make_state(op, dtype)
    make_runner = getattr(state_class, "array_runner", None)
    if make_runner is not None:
        return make_runner(op, dtype), maker

    def run(comm, buf, recvbuf):
        maker(comm, buf, recvbuf).drive()
    return run, maker
