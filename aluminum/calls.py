"""Every operation's three public calls: ``al.<op>``, ``al.nonblocking_<op>``,
``al.<op>_init``.

Written by ``python -m aluminum.forms`` from the op table (aluminum/core/ops.py); do not
edit.  Each operation's module (aluminum/allreduce.py, ...) gives them their docstrings and
plan makers (``forms.public_forms``) and is where they are documented and imported from.
"""
from .core.reduction import ReductionOp
from .recall import call_blocking, call_nonblocking, layout, ran_known, started_known

SUM = ReductionOp.SUM

# Set by each operation's module (forms.public_forms): the function that validates a
# call and makes its Plan, and the custom call of a row whose buffers are not arguments.
make_allreduce = None
make_reduce = None
make_reduce_scatter = None
make_reduce_scatterv = None
make_allgather = None
make_allgatherv = None
make_alltoall = None
make_alltoallv = None
make_bcast = None
make_gather = None
make_gatherv = None
make_scatter = None
make_scatterv = None
make_barrier = None
make_send = None
make_recv = None
make_sendrecv = None
make_multisendrecv = None
call_multisendrecv = None


def allreduce(buf, comm, stream=None, *, op=SUM, recvbuf=None, algo: str = "automatic"):
    if not ran_known('allreduce', 2, buf, recvbuf, comm, stream, 2, op, algo, None):
        call_blocking('allreduce', (buf, recvbuf), comm, stream, (op, algo), make_allreduce, buf,
                      comm, stream, op, recvbuf, algo)


def nonblocking_allreduce(buf, comm, stream=None, *, op=SUM, recvbuf=None, algo: str = "automatic"):
    request = started_known('allreduce', 2, buf, recvbuf, comm, stream, 2, op, algo, None)
    if request is not None:
        return request
    return call_nonblocking('allreduce', (buf, recvbuf), comm, stream, (op, algo), make_allreduce,
                            buf, comm, stream, op, recvbuf, algo)


def allreduce_init(buf, comm, stream=None, *, op=SUM, recvbuf=None, algo: str = "automatic"):
    return make_allreduce(buf, comm, stream, op, recvbuf, algo).prepare()


def reduce(buf, comm, stream=None, *, root: int = 0, op=SUM, recvbuf=None, algo: str = "automatic"):
    if not ran_known('reduce', 2, buf, recvbuf, comm, stream, 3, root, op, algo):
        call_blocking('reduce', (buf, recvbuf), comm, stream, (root, op, algo), make_reduce, buf,
                      comm, stream, root, op, recvbuf, algo)


def nonblocking_reduce(buf, comm, stream=None, *, root: int = 0, op=SUM, recvbuf=None,
                       algo: str = "automatic"):
    request = started_known('reduce', 2, buf, recvbuf, comm, stream, 3, root, op, algo)
    if request is not None:
        return request
    return call_nonblocking('reduce', (buf, recvbuf), comm, stream, (root, op, algo), make_reduce,
                            buf, comm, stream, root, op, recvbuf, algo)


def reduce_init(buf, comm, stream=None, *, root: int = 0, op=SUM, recvbuf=None,
                algo: str = "automatic"):
    return make_reduce(buf, comm, stream, root, op, recvbuf, algo).prepare()


def reduce_scatter(buf, comm, stream=None, *, op=SUM, recvbuf=None, algo: str = "automatic"):
    if not ran_known('reduce_scatter', 2, buf, recvbuf, comm, stream, 2, op, algo, None):
        call_blocking('reduce_scatter', (buf, recvbuf), comm, stream, (op, algo),
                      make_reduce_scatter, buf, comm, stream, op, recvbuf, algo)


def nonblocking_reduce_scatter(buf, comm, stream=None, *, op=SUM, recvbuf=None,
                               algo: str = "automatic"):
    request = started_known('reduce_scatter', 2, buf, recvbuf, comm, stream, 2, op, algo, None)
    if request is not None:
        return request
    return call_nonblocking('reduce_scatter', (buf, recvbuf), comm, stream, (op, algo),
                            make_reduce_scatter, buf, comm, stream, op, recvbuf, algo)


def reduce_scatter_init(buf, comm, stream=None, *, op=SUM, recvbuf=None, algo: str = "automatic"):
    return make_reduce_scatter(buf, comm, stream, op, recvbuf, algo).prepare()


def reduce_scatterv(buf, counts, comm, stream=None, *, op=SUM, recvbuf=None,
                    algo: str = "automatic"):
    if not ran_known('reduce_scatterv', 2, buf, recvbuf, comm, stream, 3, op, algo, layout(counts)):
        call_blocking('reduce_scatterv', (buf, recvbuf), comm, stream, (op, algo, layout(counts)),
                      make_reduce_scatterv, buf, counts, comm, stream, op, recvbuf, algo)


def nonblocking_reduce_scatterv(buf, counts, comm, stream=None, *, op=SUM, recvbuf=None,
                                algo: str = "automatic"):
    request = started_known('reduce_scatterv', 2, buf, recvbuf, comm, stream, 3, op, algo,
                            layout(counts))
    if request is not None:
        return request
    return call_nonblocking('reduce_scatterv', (buf, recvbuf), comm, stream,
                            (op, algo, layout(counts)), make_reduce_scatterv, buf, counts, comm,
                            stream, op, recvbuf, algo)


def reduce_scatterv_init(buf, counts, comm, stream=None, *, op=SUM, recvbuf=None,
                         algo: str = "automatic"):
    return make_reduce_scatterv(buf, counts, comm, stream, op, recvbuf, algo).prepare()


def allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    if not ran_known('allgather', 2, buf, recvbuf, comm, stream, 1, algo, None, None):
        call_blocking('allgather', (buf, recvbuf), comm, stream, (algo,), make_allgather, buf, comm,
                      stream, recvbuf, algo)


def nonblocking_allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    request = started_known('allgather', 2, buf, recvbuf, comm, stream, 1, algo, None, None)
    if request is not None:
        return request
    return call_nonblocking('allgather', (buf, recvbuf), comm, stream, (algo,), make_allgather, buf,
                            comm, stream, recvbuf, algo)


def allgather_init(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    return make_allgather(buf, comm, stream, recvbuf, algo).prepare()


def allgatherv(buf, counts, displs, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    if not ran_known('allgatherv', 2, buf, recvbuf, comm, stream, 3, algo, layout(counts),
                     layout(displs)):
        call_blocking('allgatherv', (buf, recvbuf), comm, stream,
                      (algo, layout(counts), layout(displs)), make_allgatherv, buf, counts, displs,
                      comm, stream, recvbuf, algo)


def nonblocking_allgatherv(buf, counts, displs, comm, stream=None, *, recvbuf=None,
                           algo: str = "automatic"):
    request = started_known('allgatherv', 2, buf, recvbuf, comm, stream, 3, algo, layout(counts),
                            layout(displs))
    if request is not None:
        return request
    return call_nonblocking('allgatherv', (buf, recvbuf), comm, stream,
                            (algo, layout(counts), layout(displs)), make_allgatherv, buf, counts,
                            displs, comm, stream, recvbuf, algo)


def allgatherv_init(buf, counts, displs, comm, stream=None, *, recvbuf=None,
                    algo: str = "automatic"):
    return make_allgatherv(buf, counts, displs, comm, stream, recvbuf, algo).prepare()


def alltoall(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    if not ran_known('alltoall', 2, buf, recvbuf, comm, stream, 1, algo, None, None):
        call_blocking('alltoall', (buf, recvbuf), comm, stream, (algo,), make_alltoall, buf, comm,
                      stream, recvbuf, algo)


def nonblocking_alltoall(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    request = started_known('alltoall', 2, buf, recvbuf, comm, stream, 1, algo, None, None)
    if request is not None:
        return request
    return call_nonblocking('alltoall', (buf, recvbuf), comm, stream, (algo,), make_alltoall, buf,
                            comm, stream, recvbuf, algo)


def alltoall_init(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    return make_alltoall(buf, comm, stream, recvbuf, algo).prepare()


def alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream=None, *,
              recvbuf=None, algo: str = "automatic"):
    call_blocking('alltoallv', (buf, recvbuf), comm, stream, (algo, layout(send_counts),
                  layout(send_displs), layout(recv_counts), layout(recv_displs)), make_alltoallv,
                  buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream, recvbuf,
                  algo)


def nonblocking_alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm,
                          stream=None, *, recvbuf=None, algo: str = "automatic"):
    return call_nonblocking('alltoallv', (buf, recvbuf), comm, stream, (algo, layout(send_counts),
                            layout(send_displs), layout(recv_counts), layout(recv_displs)),
                            make_alltoallv, buf, send_counts, send_displs, recv_counts, recv_displs,
                            comm, stream, recvbuf, algo)


def alltoallv_init(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream=None, *,
                   recvbuf=None, algo: str = "automatic"):
    return make_alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream,
                          recvbuf, algo).prepare()


def bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic"):
    if not ran_known('bcast', 1, buf, None, comm, stream, 2, root, algo, None):
        call_blocking('bcast', (buf,), comm, stream, (root, algo), make_bcast, buf, comm, stream,
                      root, algo)


def nonblocking_bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic"):
    request = started_known('bcast', 1, buf, None, comm, stream, 2, root, algo, None)
    if request is not None:
        return request
    return call_nonblocking('bcast', (buf,), comm, stream, (root, algo), make_bcast, buf, comm,
                            stream, root, algo)


def bcast_init(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic"):
    return make_bcast(buf, comm, stream, root, algo).prepare()


def gather(buf, comm, stream=None, *, root: int = 0, recvbuf=None, algo: str = "automatic"):
    if not ran_known('gather', 2, buf, recvbuf, comm, stream, 2, root, algo, None):
        call_blocking('gather', (buf, recvbuf), comm, stream, (root, algo), make_gather, buf, comm,
                      stream, root, recvbuf, algo)


def nonblocking_gather(buf, comm, stream=None, *, root: int = 0, recvbuf=None,
                       algo: str = "automatic"):
    request = started_known('gather', 2, buf, recvbuf, comm, stream, 2, root, algo, None)
    if request is not None:
        return request
    return call_nonblocking('gather', (buf, recvbuf), comm, stream, (root, algo), make_gather, buf,
                            comm, stream, root, recvbuf, algo)


def gather_init(buf, comm, stream=None, *, root: int = 0, recvbuf=None, algo: str = "automatic"):
    return make_gather(buf, comm, stream, root, recvbuf, algo).prepare()


def gatherv(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
            algo: str = "automatic"):
    call_blocking('gatherv', (buf, recvbuf), comm, stream,
                  (root, algo, layout(counts), layout(displs)), make_gatherv, buf, counts, displs,
                  comm, stream, root, recvbuf, algo)


def nonblocking_gatherv(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
                        algo: str = "automatic"):
    return call_nonblocking('gatherv', (buf, recvbuf), comm, stream,
                            (root, algo, layout(counts), layout(displs)), make_gatherv, buf, counts,
                            displs, comm, stream, root, recvbuf, algo)


def gatherv_init(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
                 algo: str = "automatic"):
    return make_gatherv(buf, counts, displs, comm, stream, root, recvbuf, algo).prepare()


def scatter(buf, comm, stream=None, *, root: int = 0, recvbuf=None, algo: str = "automatic"):
    if not ran_known('scatter', 2, buf, recvbuf, comm, stream, 2, root, algo, None):
        call_blocking('scatter', (buf, recvbuf), comm, stream, (root, algo), make_scatter, buf,
                      comm, stream, root, recvbuf, algo)


def nonblocking_scatter(buf, comm, stream=None, *, root: int = 0, recvbuf=None,
                        algo: str = "automatic"):
    request = started_known('scatter', 2, buf, recvbuf, comm, stream, 2, root, algo, None)
    if request is not None:
        return request
    return call_nonblocking('scatter', (buf, recvbuf), comm, stream, (root, algo), make_scatter,
                            buf, comm, stream, root, recvbuf, algo)


def scatter_init(buf, comm, stream=None, *, root: int = 0, recvbuf=None, algo: str = "automatic"):
    return make_scatter(buf, comm, stream, root, recvbuf, algo).prepare()


def scatterv(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
             algo: str = "automatic"):
    call_blocking('scatterv', (buf, recvbuf), comm, stream,
                  (root, algo, layout(counts), layout(displs)), make_scatterv, buf, counts, displs,
                  comm, stream, root, recvbuf, algo)


def nonblocking_scatterv(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
                         algo: str = "automatic"):
    return call_nonblocking('scatterv', (buf, recvbuf), comm, stream,
                            (root, algo, layout(counts), layout(displs)), make_scatterv, buf,
                            counts, displs, comm, stream, root, recvbuf, algo)


def scatterv_init(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
                  algo: str = "automatic"):
    return make_scatterv(buf, counts, displs, comm, stream, root, recvbuf, algo).prepare()


def barrier(comm, stream=None, *, algo: str = "automatic"):
    if not ran_known('barrier', 0, None, None, comm, stream, 1, algo, None, None):
        call_blocking('barrier', (), comm, stream, (algo,), make_barrier, comm, stream, algo)


def nonblocking_barrier(comm, stream=None, *, algo: str = "automatic"):
    request = started_known('barrier', 0, None, None, comm, stream, 1, algo, None, None)
    if request is not None:
        return request
    return call_nonblocking('barrier', (), comm, stream, (algo,), make_barrier, comm, stream, algo)


def barrier_init(comm, stream=None, *, algo: str = "automatic"):
    return make_barrier(comm, stream, algo).prepare()


def send(buf, dest: int, comm, stream=None, *, algo: str = "automatic"):
    if not ran_known('send', 1, buf, None, comm, stream, 2, dest, algo, None):
        call_blocking('send', (buf,), comm, stream, (dest, algo), make_send, buf, dest, comm,
                      stream, algo)


def nonblocking_send(buf, dest: int, comm, stream=None, *, algo: str = "automatic"):
    request = started_known('send', 1, buf, None, comm, stream, 2, dest, algo, None)
    if request is not None:
        return request
    return call_nonblocking('send', (buf,), comm, stream, (dest, algo), make_send, buf, dest, comm,
                            stream, algo)


def send_init(buf, dest: int, comm, stream=None, *, algo: str = "automatic"):
    return make_send(buf, dest, comm, stream, algo).prepare()


def recv(buf, src: int, comm, stream=None, *, algo: str = "automatic"):
    if not ran_known('recv', 1, buf, None, comm, stream, 2, src, algo, None):
        call_blocking('recv', (buf,), comm, stream, (src, algo), make_recv, buf, src, comm, stream,
                      algo)


def nonblocking_recv(buf, src: int, comm, stream=None, *, algo: str = "automatic"):
    request = started_known('recv', 1, buf, None, comm, stream, 2, src, algo, None)
    if request is not None:
        return request
    return call_nonblocking('recv', (buf,), comm, stream, (src, algo), make_recv, buf, src, comm,
                            stream, algo)


def recv_init(buf, src: int, comm, stream=None, *, algo: str = "automatic"):
    return make_recv(buf, src, comm, stream, algo).prepare()


def sendrecv(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *, algo: str = "automatic"):
    if not ran_known('sendrecv', 2, sendbuf, recvbuf, comm, stream, 3, dest, src, algo):
        call_blocking('sendrecv', (sendbuf, recvbuf), comm, stream, (dest, src, algo),
                      make_sendrecv, sendbuf, dest, recvbuf, src, comm, stream, algo)


def nonblocking_sendrecv(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *,
                         algo: str = "automatic"):
    request = started_known('sendrecv', 2, sendbuf, recvbuf, comm, stream, 3, dest, src, algo)
    if request is not None:
        return request
    return call_nonblocking('sendrecv', (sendbuf, recvbuf), comm, stream, (dest, src, algo),
                            make_sendrecv, sendbuf, dest, recvbuf, src, comm, stream, algo)


def sendrecv_init(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *,
                  algo: str = "automatic"):
    return make_sendrecv(sendbuf, dest, recvbuf, src, comm, stream, algo).prepare()


def multisendrecv(sends, recvs, comm, stream=None, *, algo: str = "automatic"):
    call_multisendrecv(call_blocking, 'multisendrecv', make_multisendrecv, sends, recvs, comm,
                       stream, algo)


def nonblocking_multisendrecv(sends, recvs, comm, stream=None, *, algo: str = "automatic"):
    return call_multisendrecv(call_nonblocking, 'multisendrecv', make_multisendrecv, sends, recvs,
                              comm, stream, algo)


def multisendrecv_init(sends, recvs, comm, stream=None, *, algo: str = "automatic"):
    return make_multisendrecv(sends, recvs, comm, stream, algo).prepare()
