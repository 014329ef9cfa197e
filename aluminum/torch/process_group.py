"""``ProcessGroupAluminum``: torch.distributed's collectives over an aluminum communicator.

A Python ``ProcessGroup`` subclass (the pattern of torch's test/distributed/test_c10d_pypg.py):
torch's ``dist.*`` functions call its methods directly, and C++ callers (DDP's reducer,
``_broadcast_coalesced``) reach them through torch's ``PyProcessGroup`` trampoline.

Two paths per call, chosen by ``opts.asyncOp`` (torch sets it from ``async_op``):
- synchronous: the blocking aluminum call runs here and the method returns None, which
  ``dist.*`` accepts for a finished call (no ``Work`` nor ``Future`` to build: that is most
  of a small allreduce's cost);
- asynchronous (and every C++ caller, whose options default to async): the nonblocking call
  starts and an ``AluminumWork`` over its requests comes back.

CUDA tensors (registered for ``cpu`` and ``cuda``) go to the group's GPU twin communicator,
NCCL or host-transfer, ordered on torch's current stream (devices.py); the asynchronous
path's ``Work.wait()`` makes the current stream wait instead of blocking the host.

Surprises: only contiguous CPU or CUDA tensors are accepted (``TensorError`` names the
argument);
point-to-point messages have no tags (aluminum matches a receive to the next send of the same
count from that peer), so a nonzero ``tag`` raises; ``ReduceOp.AVG`` works on every dtype but
bool; on bool tensors SUM/MAX/BOR mean logical or, PRODUCT/MIN/BAND logical and, BXOR
logical xor; ``PREMUL_SUM`` scales a copy of the input by its factor, then sums.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Callable, Sequence

import torch
import torch.distributed as dist

import aluminum as al

from . import devices
from .errors import GroupError, TensorError
from .work import AluminumWork

_RedOp = dist.ReduceOp.RedOpType
_PREMUL = object()   # PREMUL_SUM: a sum of the inputs scaled by the op's factor
_OPS = {_RedOp.SUM: al.SUM, _RedOp.PRODUCT: al.PROD, _RedOp.MIN: al.MIN, _RedOp.MAX: al.MAX,
        _RedOp.BAND: al.BAND, _RedOp.BOR: al.BOR, _RedOp.BXOR: al.BXOR, _RedOp.AVG: al.AVG,
        _RedOp.PREMUL_SUM: _PREMUL}
_BOOL_OPS = {_RedOp.SUM: al.LOR, _RedOp.MAX: al.LOR, _RedOp.BOR: al.LOR,
             _RedOp.PRODUCT: al.LAND, _RedOp.MIN: al.LAND, _RedOp.BAND: al.LAND,
             _RedOp.BXOR: al.LXOR}

# A call to make: blocking function, nonblocking function, positional and keyword arguments.
_Call = tuple[Callable, Callable, tuple, dict]
_HOST: dict = {}     # the keyword arguments a host call adds (none)


class ProcessGroupAluminum(dist.ProcessGroup):
    """The "aluminum" backend's process group: one aluminum communicator, ranks as torch's
    group ranks.  Made by ``dist.init_process_group("aluminum")`` / ``dist.new_group``."""

    def __init__(self, comm: al.Communicator) -> None:
        # (rank, size): torch 2.13's (store, rank, size) constructor does not make the Python
        # subclass (pybind11 "not an alias instance"); the store is not needed (MPI is).
        super().__init__(comm.rank, comm.size)
        self.comm = comm

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "aluminum"

    def __repr__(self) -> str:
        return f"ProcessGroupAluminum(rank={self.comm.rank}, size={self.comm.size})"

    # -- reductions ------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts=None) -> AluminumWork | None:
        """``dist.all_reduce``: in place on the one tensor in ``tensors``."""
        opts = opts or dist.AllreduceOptions()
        tensor = _single(tensors, "tensor")
        op, source = _reduction(opts.reduceOp, tensor)
        comm, where = self._on(tensor)
        if not opts.asyncOp:                   # the latency path: nothing but the call
            if source is None:
                al.allreduce(tensor, comm, op=op, **where)
            else:
                al.allreduce(source, comm, op=op, recvbuf=tensor, **where)
            return None
        kwargs = {"op": op} if source is None else {"op": op, "recvbuf": tensor}
        return AluminumWork([al.nonblocking_allreduce(
            tensor if source is None else source, comm, **kwargs, **where)], tensors,
            device=_device(tensor))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts=None):
        """``dist.all_reduce_coalesced``: each tensor allreduced in place, one Work for all."""
        opts = opts or dist.AllreduceCoalescedOptions()
        calls = []
        for i, tensor in enumerate(tensors):
            op, source = _reduction(opts.reduceOp, _check(tensor, f"tensors[{i}]"))
            devices.same_device(tensor, tensors[0], f"tensors[{i}]")
            comm, where = self._on(tensor)
            if source is None:
                calls.append(_call(al.OPS["allreduce"], tensor, comm, op=op, **where))
            else:
                calls.append(_call(al.OPS["allreduce"], source, comm, op=op, recvbuf=tensor,
                                   **where))
        return _launch(opts.asyncOp, calls, tensors, device=_device(*tensors[:1]))

    def reduce(self, tensors: list[torch.Tensor], opts=None):
        """``dist.reduce``: the root's tensor gets the result; others' are left unchanged."""
        opts = opts or dist.ReduceOptions()
        tensor = _single(tensors, "tensor")
        op, source = _reduction(opts.reduceOp, tensor)
        root = self._root(opts.rootRank)
        comm, where = self._on(tensor)
        if source is None:
            call = _call(al.OPS["reduce"], tensor, comm, root=root, op=op, **where)
        else:
            call = _call(al.OPS["reduce"], source, comm, root=root, op=op,
                         recvbuf=tensor if self.comm.rank == root else None, **where)
        return _launch(opts.asyncOp, [call], tensors, device=_device(tensor))

    def reduce_scatter(self, output_tensors: list[torch.Tensor],
                       input_tensors: list[list[torch.Tensor]], opts=None):
        """``dist.reduce_scatter``: ``output`` gets the reduction of every rank's
        ``input_list[rank]`` (blocks may differ in size between ranks' slots)."""
        opts = opts or dist.ReduceScatterOptions()
        output = _single(output_tensors, "output")
        inputs = self._per_rank(_single_list(input_tensors, "input_list"), "input_list",
                                output.dtype, device=output.device)
        if inputs[self.comm.rank].numel() != output.numel():
            raise TensorError(f"input_list[{self.comm.rank}]: expected {output.numel()} "
                              f"elements (as output), got {inputs[self.comm.rank].numel()}")
        op, _ = _reduction(opts.reduceOp, output)
        flat = _flatten(inputs, _premul_factor(opts.reduceOp))
        counts = [t.numel() for t in inputs]
        comm, where = self._on(output)
        call = _sized(al.OPS["reduce_scatter"], counts, flat, comm, op=op, recvbuf=output,
                      **where)
        return _launch(opts.asyncOp, [call], output_tensors, device=_device(output))

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        """``dist.reduce_scatter_tensor``: ``input`` holds ``size`` blocks of ``output``'s
        size; rank ``r`` gets the reduction of block ``r``."""
        opts = opts or dist.ReduceScatterOptions()
        self._check_multiple(_check(output, "output"), _check(input, "input"))
        op, source = _reduction(opts.reduceOp, input)
        comm, where = self._on(output)
        call = _call(al.OPS["reduce_scatter"], input if source is None else source, comm,
                     op=op, recvbuf=output, **where)
        return _launch(opts.asyncOp, [call], [output], device=_device(output))

    # torch releases before 2.13 call these names for all_gather_into_tensor,
    # reduce_scatter_tensor and all_to_all_single
    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int], opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                      opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        return self.all_gather_single(output, input, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts=None):
        """``reduce_scatter_tensor`` under ``_coalescing_manager`` (FSDP): one per pair."""
        opts = opts or dist.ReduceScatterOptions()
        calls = []
        for i, (output, input) in enumerate(zip(outputs, inputs, strict=True)):
            self._check_multiple(_check(output, f"outputs[{i}]"), _check(input, f"inputs[{i}]"))
            devices.same_device(output, outputs[0], f"outputs[{i}]")
            op, source = _reduction(opts.reduceOp, input)
            comm, where = self._on(output)
            calls.append(_call(al.OPS["reduce_scatter"], input if source is None else source,
                               comm, op=op, recvbuf=output, **where))
        return _launch(opts.asyncOp, calls, outputs, device=_device(*outputs[:1]))

    # -- data movement ---------------------------------------------------------------------

    def broadcast(self, tensors: list[torch.Tensor], opts=None):
        """``dist.broadcast``: every rank's tensor becomes the root's (in place)."""
        opts = opts or dist.BroadcastOptions()
        root = self._root(opts.rootRank)
        calls = []
        for i, tensor in enumerate(tensors):
            devices.same_device(_check(tensor, f"tensors[{i}]"), tensors[0], f"tensors[{i}]")
            comm, where = self._on(tensor)
            calls.append(_call(al.OPS["bcast"], tensor, comm, root=root, **where))
        return _launch(opts.asyncOp, calls, tensors, device=_device(*tensors[:1]))

    def allgather(self, output_tensors: list[list[torch.Tensor]],
                  input_tensors: list[torch.Tensor], opts=None):
        """``dist.all_gather``: ``tensor_list[r]`` gets rank ``r``'s tensor (sizes may
        differ between ranks, then allgatherv); gathered into one staging tensor and
        copied out."""
        opts = opts or dist.AllgatherOptions()
        source = _single(input_tensors, "tensor")
        outputs = self._per_rank(_single_list(output_tensors, "tensor_list"), "tensor_list",
                                 source.dtype, device=source.device)
        if outputs[self.comm.rank].numel() != source.numel():
            raise TensorError(f"tensor_list[{self.comm.rank}]: expected {source.numel()} "
                              f"elements (as tensor), got {outputs[self.comm.rank].numel()}")
        counts = [t.numel() for t in outputs]
        staging = torch.empty(sum(counts), dtype=source.dtype, device=source.device)
        comm, where = self._on(source)
        call = _sized(al.OPS["allgather"], counts, source, comm, recvbuf=staging, **where)
        return _launch(opts.asyncOp, [call], output_tensors,
                       lambda: _unflatten(staging, outputs), device=_device(source))

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        """``dist.all_gather_into_tensor``: ``output`` (``size`` times ``input``'s elements,
        concatenated or stacked) gets every rank's ``input`` in rank order, with no copy."""
        opts = opts or dist.AllgatherOptions()
        self._check_multiple(_check(input, "input"), _check(output, "output"))
        comm, where = self._on(output)
        call = _call(al.OPS["allgather"], input, comm, recvbuf=output, **where)
        return _launch(opts.asyncOp, [call], [output], device=_device(output))

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts=None):
        """``all_gather_into_tensor`` under ``_coalescing_manager`` (FSDP): one per pair."""
        opts = opts or dist.AllgatherOptions()
        calls = []
        for i, (output, input) in enumerate(zip(outputs, inputs, strict=True)):
            self._check_multiple(_check(input, f"inputs[{i}]"), _check(output, f"outputs[{i}]"))
            devices.same_device(output, outputs[0], f"outputs[{i}]")
            comm, where = self._on(output)
            calls.append(_call(al.OPS["allgather"], input, comm, recvbuf=output, **where))
        return _launch(opts.asyncOp, calls, outputs, device=_device(*outputs[:1]))

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]],
                            input_list: list[torch.Tensor], opts=None):
        """``dist.all_gather_coalesced`` (deprecated in torch): ``all_gather`` per input."""
        opts = opts or dist.AllgatherOptions()
        works = [self.allgather([outputs], [source], _async(dist.AllgatherOptions()))
                 for outputs, source in zip(output_lists, input_list, strict=True)]
        return _joined(opts.asyncOp, works, output_lists)

    def gather(self, output_tensors: list[list[torch.Tensor]],
               input_tensors: list[torch.Tensor], opts=None):
        """``dist.gather``: the root's ``gather_list[r]`` gets rank ``r``'s tensor; other
        ranks pass no list."""
        opts = opts or dist.GatherOptions()
        source = _single(input_tensors, "tensor")
        root = self._root(opts.rootRank)
        comm, where = self._on(source)
        if self.comm.rank != root:
            if output_tensors and output_tensors[0]:
                raise TensorError(f"gather_list: only the root (rank {root}) passes one, "
                                  f"rank {self.comm.rank} passed {len(output_tensors[0])}")
            call = _call(al.OPS["gather"], source, comm, root=root, **where)
            return _launch(opts.asyncOp, [call], [], device=_device(source))
        outputs = self._per_rank(_single_list(output_tensors, "gather_list"), "gather_list",
                                 source.dtype, same_numel=source.numel(), device=source.device)
        staging = torch.empty(source.numel() * self.comm.size, dtype=source.dtype,
                              device=source.device)
        call = _call(al.OPS["gather"], source, comm, root=root, recvbuf=staging, **where)
        return _launch(opts.asyncOp, [call], output_tensors,
                       lambda: _unflatten(staging, outputs), device=_device(source))

    def scatter(self, output_tensors: list[torch.Tensor],
                input_tensors: list[list[torch.Tensor]], opts=None):
        """``dist.scatter``: rank ``r``'s tensor gets the root's ``scatter_list[r]``."""
        opts = opts or dist.ScatterOptions()
        output = _single(output_tensors, "tensor")
        root = self._root(opts.rootRank)
        comm, where = self._on(output)
        if self.comm.rank != root:
            if input_tensors and input_tensors[0]:
                raise TensorError(f"scatter_list: only the root (rank {root}) passes one, "
                                  f"rank {self.comm.rank} passed {len(input_tensors[0])}")
            call = _call(al.OPS["scatter"], None, comm, root=root, recvbuf=output, **where)
        else:
            inputs = self._per_rank(_single_list(input_tensors, "scatter_list"),
                                    "scatter_list", output.dtype, same_numel=output.numel(),
                                    device=output.device)
            call = _call(al.OPS["scatter"], _flatten(inputs), comm, root=root, recvbuf=output,
                         **where)
        return _launch(opts.asyncOp, [call], output_tensors, device=_device(output))

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                 opts=None):
        """``dist.all_to_all``: ``output_list[r]`` gets rank ``r``'s ``input_list[me]``
        (sizes may differ per pair)."""
        opts = opts or dist.AllToAllOptions()
        inputs = self._per_rank(input_tensors, "input_list", None)
        device = inputs[0].device
        outputs = self._per_rank(output_tensors, "output_list", inputs[0].dtype, device=device)
        send_counts = [t.numel() for t in inputs]
        recv_counts = [t.numel() for t in outputs]
        staging = torch.empty(sum(recv_counts), dtype=outputs[0].dtype, device=device)
        comm, where = self._on(staging)
        call = _call(al.OPS["alltoallv"], _flatten(inputs), send_counts,
                     _displacements(send_counts), recv_counts, _displacements(recv_counts),
                     comm, recvbuf=staging, **where)
        return _launch(opts.asyncOp, [call], output_tensors,
                       lambda: _unflatten(staging, outputs), device=_device(staging))

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts=None):
        """``dist.all_to_all_single``: split along dim 0 (evenly when no sizes are given);
        no copies."""
        opts = opts or dist.AllToAllOptions()
        _check(output, "output")
        _check(input, "input")
        if output.dtype != input.dtype:
            raise TensorError(f"output: expected dtype {input.dtype} (as input), "
                              f"got {output.dtype}")
        devices.same_device(output, input, "output")
        send_counts = self._splits(input, input_split_sizes, "input_split_sizes")
        recv_counts = self._splits(output, output_split_sizes, "output_split_sizes")
        comm, where = self._on(output)
        call = _call(al.OPS["alltoallv"], input, send_counts, _displacements(send_counts),
                     recv_counts, _displacements(recv_counts), comm, recvbuf=output, **where)
        return _launch(opts.asyncOp, [call], [output], device=_device(output))

    def barrier(self, opts=None):
        """``dist.barrier``: returns (or its Work completes) once every rank entered it."""
        opts = opts or dist.BarrierOptions()
        return _launch(opts.asyncOp, [(al.barrier, al.nonblocking_barrier, (self.comm,), {})],
                       [])

    # -- point to point --------------------------------------------------------------------

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> AluminumWork:
        """``dist.send``/``isend``: always nonblocking (torch waits when it must)."""
        tensor = _single(tensors, "tensor")
        _check_tag(tag)
        comm, where = self._on(tensor)
        return AluminumWork([al.nonblocking_send(tensor, self._peer(dst, "dst"), comm,
                                                 **where)], tensors, device=_device(tensor))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> AluminumWork:
        """``dist.recv``/``irecv`` from ``src``: the message must have the tensor's size."""
        tensor = _single(tensors, "tensor")
        _check_tag(tag)
        comm, where = self._on(tensor)
        return AluminumWork([al.nonblocking_recv(tensor, self._peer(src, "src"), comm,
                                                 **where)], tensors, device=_device(tensor))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0):
        """Not available: aluminum receives only from a named peer."""
        raise al.UnsupportedError("src: the aluminum process group receives from a given "
                                  "rank only (no MPI_ANY_SOURCE); pass src")

    # -- argument checks -------------------------------------------------------------------

    def _on(self, tensor: torch.Tensor) -> tuple[al.Communicator, dict]:
        """The communicator a call on ``tensor`` runs on and the ``stream=`` it takes."""
        if tensor.is_cuda:
            return devices.placement(self.comm, tensor)
        return self.comm, _HOST

    def _root(self, root: int) -> int:
        return self._peer(root, "root")

    def _peer(self, rank: int, name: str) -> int:
        if not 0 <= rank < self.comm.size:
            raise al.ArgumentError(f"{name}: expected a rank in [0, {self.comm.size}), "
                                   f"got {rank}")
        return rank

    def _per_rank(self, tensors: Sequence[torch.Tensor], name: str, dtype,
                  same_numel: int | None = None,
                  device: torch.device | None = None) -> Sequence[torch.Tensor]:
        """``tensors`` checked as one tensor per rank, of ``dtype`` (None: any, but one), on
        ``device`` (None: any, but one) and, with ``same_numel``, all of that many elements."""
        if len(tensors) != self.comm.size:
            raise TensorError(f"{name}: expected {self.comm.size} tensors (one per rank), "
                              f"got {len(tensors)}")
        dtype = dtype if dtype is not None else tensors[0].dtype
        device = device if device is not None else tensors[0].device
        for i, tensor in enumerate(tensors):
            _check(tensor, f"{name}[{i}]")
            if tensor.device != device:
                raise TensorError(f"{name}[{i}]: expected a tensor on {device}, got one on "
                                  f"{tensor.device}")
            if tensor.dtype != dtype:
                raise TensorError(f"{name}[{i}]: expected dtype {dtype}, got {tensor.dtype}")
            if same_numel is not None and tensor.numel() != same_numel:
                raise TensorError(f"{name}[{i}]: expected {same_numel} elements, got "
                                  f"{tensor.numel()}")
        return tensors

    def _check_multiple(self, small: torch.Tensor, large: torch.Tensor) -> None:
        if large.dtype != small.dtype or large.numel() != small.numel() * self.comm.size:
            raise TensorError(f"expected the larger tensor to hold {self.comm.size} x "
                              f"{small.numel()} elements of {small.dtype}, got "
                              f"{large.numel()} of {large.dtype}")

    def _splits(self, tensor: torch.Tensor, sizes: list[int], name: str) -> list[int]:
        """Element counts per rank from split sizes along dim 0 (even when empty)."""
        rows = tensor.shape[0] if tensor.dim() else 1
        per_row = tensor.numel() // rows if rows else 0
        if not sizes:
            if rows % self.comm.size:
                raise TensorError(f"{name}: none given, and dim 0 ({rows}) does not split "
                                  f"evenly over {self.comm.size} ranks")
            return [rows // self.comm.size * per_row] * self.comm.size
        if len(sizes) != self.comm.size or sum(sizes) != rows:
            raise TensorError(f"{name}: expected {self.comm.size} sizes summing to dim 0 "
                              f"({rows}), got {list(sizes)}")
        return [size * per_row for size in sizes]


def _call(row: al.OpSpec, *args, **kwargs) -> _Call:
    """The aluminum operation of op-table row ``row`` with these arguments, blocking and
    nonblocking."""
    calls = al.calls_of(row)
    return calls.blocking, calls.nonblocking, args, kwargs


def _sized(row: al.OpSpec, counts: list[int], buf, comm, **kwargs) -> _Call:
    """``row``'s call on ``buf`` where every rank's block has one size (``counts``: element
    counts per rank), else the call of its vector variant (the op table's row whose ``base``
    is ``row``), given ``counts`` and packed displacements for its layouts."""
    if len(set(counts)) == 1:
        return _call(row, buf, comm, **kwargs)
    vector = next(other for other in al.OPS.values() if other.vector and other.base == row.name)
    layouts = [counts if name.endswith("counts") else _displacements(counts)
               for name in vector.layouts]
    return _call(vector, buf, *layouts, comm, **kwargs)


def _launch(async_op: bool, calls: list[_Call], result: list,
            finish: Callable[[], None] | None = None,
            device: torch.device | None = None) -> AluminumWork | None:
    """Run ``calls`` blocking then ``finish`` (returning None: done; on a CUDA ``device``
    both are enqueued on torch's current stream), or start them and return the Work that
    completes once all are done and ``finish`` ran."""
    if not async_op:
        for blocking, _, args, kwargs in calls:
            blocking(*args, **kwargs)
        if finish is not None:
            finish()
        return None
    return AluminumWork([start(*args, **kwargs) for _, start, args, kwargs in calls],
                        result, finish, device=device)


def _device(tensor: torch.Tensor | None = None) -> torch.device | None:
    """The CUDA device a Work on ``tensor`` waits on (None: host)."""
    return tensor.device if tensor is not None and tensor.is_cuda else None


def _joined(async_op: bool, works: list[AluminumWork], result: list) -> AluminumWork | None:
    """One result for several started Works: waited for here, or combined into one."""
    if not async_op:
        for work in works:
            work.wait()
        return None
    return AluminumWork([request for work in works for request in work._requests], result,
                        lambda: [work.wait() for work in works], device=works[0]._device
                        if works else None)


def _async(opts):
    opts.asyncOp = True
    return opts


def _check(tensor, name: str) -> torch.Tensor:
    """``tensor`` if aluminum can communicate it in place: a dense contiguous CPU or CUDA
    tensor."""
    if type(tensor) is torch.Tensor and (tensor.is_cpu or tensor.is_cuda) \
            and tensor.layout is torch.strided and tensor.is_contiguous():
        return tensor       # (the common case, in a fraction of the checks below)
    if not isinstance(tensor, torch.Tensor):
        raise TensorError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise TensorError(f"{name}: expected a CPU or CUDA tensor (the aluminum process "
                          f"group is registered for cpu and cuda), got one on "
                          f"{tensor.device}")
    if tensor.layout != torch.strided:
        raise TensorError(f"{name}: expected a dense tensor, got layout {tensor.layout}")
    if not tensor.is_contiguous():
        raise TensorError(f"{name}: expected a contiguous tensor, got shape "
                          f"{tuple(tensor.shape)} with strides {tensor.stride()} "
                          f"(call .contiguous() first)")
    return tensor


def _single(tensors: list[torch.Tensor], name: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise TensorError(f"{name}: expected one tensor per call, got {len(tensors)}")
    return _check(tensors[0], name)


def _single_list(lists: list[list[torch.Tensor]], name: str) -> list[torch.Tensor]:
    if len(lists) != 1:
        raise TensorError(f"{name}: expected one list per call, got {len(lists)}")
    return lists[0]


def _check_tag(tag: int) -> None:
    if tag != 0:
        raise al.UnsupportedError(f"tag: aluminum point-to-point has no tags (a receive "
                                  f"matches the next send of the same count), got {tag}")


def _reduction(reduce_op, tensor: torch.Tensor) -> tuple[al.ReductionOp, torch.Tensor | None]:
    """The aluminum op for torch's ``reduce_op`` on ``tensor``'s dtype, and for PREMUL_SUM
    the scaled copy to reduce instead of ``tensor`` (else None)."""
    kind = getattr(reduce_op, "op", reduce_op)
    op = (_BOOL_OPS if tensor.dtype is torch.bool else _OPS).get(kind)
    if op is None:
        raise al.UnsupportedError(f"op: {kind.name} is not defined on {tensor.dtype} tensors")
    if op is _PREMUL:
        return al.SUM, tensor * _premul_factor(reduce_op)
    return op, None


def _premul_factor(reduce_op):
    """PREMUL_SUM's factor (a number or a one-element tensor), None for other ops."""
    if getattr(reduce_op, "op", reduce_op) != _RedOp.PREMUL_SUM:
        return None
    factor = getattr(reduce_op, "factor", None)
    if factor is None:
        raise al.UnsupportedError(f"op: PREMUL_SUM's factor is not readable from Python in "
                                  f"torch {torch.__version__} (torch 2.13 exposes it)")
    return factor


def _flatten(tensors: Sequence[torch.Tensor], factor=None) -> torch.Tensor:
    """One contiguous tensor holding ``tensors`` back to back (scaled by ``factor``)."""
    flat = torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)
    return flat if factor is None else flat.mul_(factor)


def _unflatten(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    offset = 0
    for tensor in tensors:
        count = tensor.numel()
        tensor.view(-1).copy_(flat[offset:offset + count])
        offset += count


def _displacements(counts: list[int]) -> list[int]:
    displs, offset = [], 0
    for count in counts:
        displs.append(offset)
        offset += count
    return displs


def create_process_group(options, backend_options=None) -> ProcessGroupAluminum:
    """The creator torch calls (``register_backend(..., extended_api=True)``) for the
    default group and for each ``dist.new_group``; only the group's members call it.

    The default group runs over every MPI rank and requires torch's rank and size to be
    MPI's; a new group's communicator is made with ``MPI_Comm_create_group`` over
    ``COMM_WORLD``, collective over its members only (as torch calls it), its ranks
    ordered as torch's sorted rank list.
    """
    from .rendezvous import world_communicator

    ranks = list(options.global_ranks_in_group)
    if not ranks:
        comm = world_communicator()
        if (options.group_rank, options.group_size) != (comm.rank, comm.size):
            raise GroupError(f"init_process_group: rank {options.group_rank} of "
                             f"{options.group_size} does not match MPI's rank {comm.rank} of "
                             f"{comm.size}; start the job with python -m aluminum.run -n N "
                             f"and leave RANK/WORLD_SIZE unset")
        return ProcessGroupAluminum(comm)
    return ProcessGroupAluminum(_subgroup(ranks, options.group_rank))


def _subgroup(ranks: list[int], group_rank: int) -> al.MPICommunicator:
    al.init()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if len(set(ranks)) != len(ranks) or not all(0 <= r < world.Get_size() for r in ranks):
        raise GroupError(f"ranks: expected distinct ranks in [0, {world.Get_size()}), "
                         f"got {ranks}")
    if dist.is_initialized() and dist.get_world_size() != world.Get_size():
        raise GroupError(f"new_group: the default group has {dist.get_world_size()} ranks "
                         f"but the MPI job {world.Get_size()}; aluminum groups need torch's "
                         f"global ranks to be MPI's")
    if not 0 <= group_rank < len(ranks) or ranks[group_rank] != world.Get_rank():
        raise GroupError(f"new_group: this process is MPI rank {world.Get_rank()}, but torch "
                         f"made it rank {group_rank} of {ranks}; aluminum groups need torch's "
                         f"global ranks to be MPI's")
    members = world.Get_group().Incl(ranks)
    part = world.Create_group(members)
    members.Free()
    try:
        return al.MPICommunicator(mpi_comm=part)
    finally:
        part.Free()
