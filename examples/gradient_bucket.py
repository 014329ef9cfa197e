"""Average a model's gradients across ranks with no copies: one flat bucket in memory the
node's ranks share, and every parameter's ``.grad`` a view into it (as PyTorch DDP's
``gradient_as_bucket_view=True`` does with its buckets).  Backward writes the gradients
straight into the bucket, and the allreduce reduces them there.

Run with: python -m aluminum.run -n 2 examples/gradient_bucket.py
"""
import numpy as np
import torch

import aluminum as al

comm = al.MPICommunicator()
torch.manual_seed(0)                                   # the same model on every rank
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
params = list(model.parameters())

# One bucket for all the gradients (al.shared_empty is a collective: every rank calls it).
bucket = torch.from_numpy(al.shared_empty(sum(p.numel() for p in params), np.float32, comm))
bucket.zero_()
offset = 0
for p in params:
    p.grad = bucket[offset:offset + p.numel()].view_as(p)   # backward accumulates into it
    offset += p.numel()

torch.manual_seed(1 + comm.rank)                       # each rank its own batch
inputs, labels = torch.randn(32, 64), torch.randint(0, 10, (32,))
torch.nn.functional.cross_entropy(model(inputs), labels).backward()
mine = [p.grad.clone() for p in params]

al.allreduce(bucket, comm, op=al.AVG, algo="shared_memory")   # in place, in shared memory

everyone = comm.mpi_comm.allgather([g.numpy() for g in mine])
for i, p in enumerate(params):
    expected = np.mean([grads[i] for grads in everyone], axis=0)
    assert np.allclose(p.grad.numpy(), expected, rtol=1e-5, atol=1e-7), f"parameter {i}"
if comm.rank == 0:
    print(f"averaged {bucket.numel()} gradient values over {comm.size} ranks: "
          f"every parameter's .grad matches the mean of the ranks' gradients")

for p in params:                                       # let go of the shared memory
    p.grad = None
del bucket
al.finalize()
