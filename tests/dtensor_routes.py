"""Print, as JSON, the route torch DTensor's default (greedy) planner takes for every pair of
layouts from {R, S(0), S(1), P} per mesh dimension on meshes (1), (2), (3), (4) and (2, 2):
``{"mesh|src|dst": [[mesh_dim, from, to], ...]}``.  Run as a program by
tests/test_layouts.py (torch's fake process group stays out of the test process)."""
import itertools
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._redistribute import _gen_transform_infos_non_cached
from torch.testing._internal.distributed.fake_pg import FakeStore

PLACEMENTS = {"R": Replicate(), "S0": Shard(0), "S1": Shard(1), "P": Partial()}
NAMES = {str(v): k for k, v in PLACEMENTS.items()}


def main() -> None:
    shape = tuple(int(d) for d in sys.argv[1].split(","))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    meta = TensorMeta(torch.Size(shape), (shape[1], 1), torch.float64)
    routes = {}
    for name, mesh_shape in (("1", (1,)), ("2", (2,)), ("3", (3,)), ("4", (4,)),
                             ("2x2", (2, 2))):
        size = 1
        for d in mesh_shape:
            size *= d
        mesh = DeviceMesh("cpu", torch.arange(size).reshape(mesh_shape))
        for src in itertools.product(PLACEMENTS, repeat=len(mesh_shape)):
            for dst in itertools.product(PLACEMENTS, repeat=len(mesh_shape)):
                infos = _gen_transform_infos_non_cached(
                    DTensorSpec(mesh, tuple(PLACEMENTS[p] for p in src), tensor_meta=meta),
                    DTensorSpec(mesh, tuple(PLACEMENTS[p] for p in dst), tensor_meta=meta))
                routes["|".join((name, ",".join(src), ",".join(dst)))] = [
                    [info.mesh_dim, NAMES[str(info.src_dst_placements[0])],
                     NAMES[str(info.src_dst_placements[1])]] for info in infos]
    dist.destroy_process_group()
    print(json.dumps(routes))


if __name__ == "__main__":
    main()
