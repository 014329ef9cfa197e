"""The one-rank default "aluminum" process group the single-process torch tests run on."""
import socket

import torch.distributed as dist

# torch before 2.13 does not show PREMUL_SUM's factor to Python process groups
PREMUL_READABLE = hasattr(dist._make_nccl_premul_sum(2.0), "factor")


def init_one_rank_group() -> None:
    """``dist.init_process_group("aluminum")`` as rank 0 of 1, no launcher: a TCP store on
    a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("aluminum", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
