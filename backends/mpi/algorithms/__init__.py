"""Custom MPI algorithms (ring, recursive doubling, Rabenseifner, shared memory, hierarchical,
direct reduce, the barrier through the node's arrival board).

``CUSTOM_ALGORITHMS[op][name]`` is the State class of algorithm ``name`` for ``op``.  Each
class lives in its own file and writes its algorithm as one generator (program.py), so the
blocking and the nonblocking call run the same code.
"""
from ....core.names import Algorithm
from .direct_reduce import DirectReduce
from .hierarchical import HierarchicalAllreduce
from .hierarchical_allgather import HierarchicalAllgather
from .hierarchical_bcast import HierarchicalBcast
from .hierarchical_reduce import HierarchicalReduce
from .rabenseifner import RabenseifnerAllreduce
from .recursive_doubling import RecursiveDoublingAllreduce
from .ring_allgather import RingAllgather
from .ring_allreduce import RingAllreduce
from .ring_reduce_scatter import RingReduceScatter
from .shared_memory import SharedMemoryAllreduce
from .shared_memory_barrier import SharedMemoryBarrier

CUSTOM_ALGORITHMS: dict[str, dict[Algorithm, type]] = {
    "allreduce": {
        Algorithm.RECURSIVE_DOUBLING: RecursiveDoublingAllreduce,
        Algorithm.RING: RingAllreduce,
        Algorithm.RABENSEIFNER: RabenseifnerAllreduce,
        Algorithm.SHARED_MEMORY: SharedMemoryAllreduce,
        Algorithm.HIERARCHICAL: HierarchicalAllreduce,
    },
    "reduce_scatter": {Algorithm.RING: RingReduceScatter},
    "allgather": {Algorithm.RING: RingAllgather, Algorithm.HIERARCHICAL: HierarchicalAllgather},
    "reduce": {Algorithm.DIRECT: DirectReduce, Algorithm.HIERARCHICAL: HierarchicalReduce},
    "bcast": {Algorithm.HIERARCHICAL: HierarchicalBcast},
    "barrier": {Algorithm.SHARED_MEMORY: SharedMemoryBarrier},
}
