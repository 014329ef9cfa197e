"""Train a small CNN data-parallel on synthetic data three ways and check each against training
in one process on the whole global batch:

  --mode gloo-ddp      torch DDP over torch's gloo backend
  --mode aluminum-ddp  torch DDP over the "aluminum" backend (the one-line switch)
  --mode aluminum-dp   aluminum.torch.DistributedDataParallel

Run with: python -m aluminum.run -n 2 examples/torch_cnn.py [--mode M] [--steps K]
"""
import argparse
import copy
import sys

import torch
import torch.distributed as dist

import aluminum.torch as altorch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--mode", choices=["gloo-ddp", "aluminum-ddp", "aluminum-dp"],
                    default="aluminum-dp")
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--batch", type=int, default=8, help="samples per rank per step")
args = parser.parse_args()

dist.init_process_group("gloo" if args.mode == "gloo-ddp" else "aluminum")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)                                    # same start; the wrap syncs anyway
model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
                            torch.nn.Linear(64, 10))
single = copy.deepcopy(model)                           # the reference: one process, all data
if args.mode == "aluminum-dp":
    parallel = altorch.DistributedDataParallel(model)
else:
    parallel = torch.nn.parallel.DistributedDataParallel(model)

generator = torch.Generator().manual_seed(1)            # the same global batches everywhere
optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, single)]
for step in range(args.steps):
    inputs = torch.randn(args.batch * size, 1, 12, 12, generator=generator)
    labels = torch.randint(0, 10, (args.batch * size,), generator=generator)
    mine = slice(rank * args.batch, (rank + 1) * args.batch)
    for net, optimizer, rows in ((parallel, optimizers[0], mine),
                                 (single, optimizers[1], slice(None))):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs[rows]), labels[rows]).backward()
        optimizer.step()

wrong = [name for (name, p), q in zip(model.named_parameters(), single.parameters())
         if not torch.allclose(p, q, rtol=1e-5, atol=1e-6)]
if wrong:
    print(f"rank {rank}: parameters differ from single-process training: {wrong}")
    sys.exit(1)
if rank == 0:
    print(f"{args.mode}: {args.steps} steps over {size} ranks equal single-process training "
          f"on the global batch")
if args.mode == "aluminum-dp":
    parallel.close()                                    # let go of the shared buckets
dist.destroy_process_group()
