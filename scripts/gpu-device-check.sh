#!/usr/bin/env bash
# The GPU device check (docs/gpu.md), for a session lent a GPU: a machine with a GPU driver and
# PyTorch but no Rust and no network. Everything it needs travels in the working tree:
#   .gpu/rnnlens   the stripped release binary built with --features gpu
#   .gpu/gpu-test  the compiled tests/gpu.rs (the GPU against the CPU, every cell)
#   .gl/*.deb      the Vulkan loader (libvulkan1 and the GL dispatch libraries)
# scripts/gpu-device-check.sh --prepare builds and gathers the first two here.
# Then, on the device: scripts/gpu-device-check.sh [OUTDIR] (default $OUT, else gpu-check/).
# It runs the correctness tests, `rnnlens bench --device gpu` and bench/pytorch_bench.py
# --device cuda (eager, then compiled) at the same shapes, and writes the CSVs, the log and the
# table (table.md) into OUTDIR. On a machine whose only Vulkan device is lavapipe it runs small
# shapes (a dry run: correctness only, no figure means anything). On an H200 it took 59-87 s
# with three cells; every step has a time limit (at most about 15 minutes in all), so give the
# device call room for the seven cells: SHAPES= and CELLS= narrow it.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
  set -e
  mkdir -p .gpu
  cargo build --release --features gpu -q
  cp target/release/rnnlens .gpu/rnnlens && strip .gpu/rnnlens
  test=$(cargo test --release --features gpu --test gpu --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and "gpu-" in m["executable"]][-1])')
  cp "$test" .gpu/gpu-test && strip .gpu/gpu-test
  git rev-parse HEAD > .gpu/commit
  ls -la .gpu
  exit 0
fi
out=${1:-${OUT:-gpu-check}}
mkdir -p "$out"
log="$out/log.txt"
say() { echo "$@" | tee -a "$log"; }
start=$(date +%s)
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then
  export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
say "# GPU device check, $(date -u +%Y-%m-%dT%H:%MZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
bin=.gpu/rnnlens
shapes=${SHAPES:-c1,c2,c3,isan,ptb,ptb128,mnist}
cells=${CELLS:-lstm,gru,rnn,ran-tanh,rwa,rda-exp-tanh,rda-sigmoid-id,isan}
extra=()
if ! command -v nvidia-smi >/dev/null; then
  say "no NVIDIA GPU here: a dry run at small shapes"
  shapes=c1,isan; extra=(--batch 4 --window 5)
fi
say "## correctness: tests/gpu.rs (the GPU against the CPU engine)"
timeout 240 .gpu/gpu-test --nocapture --test-threads 1 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
say "correctness exit status: ${PIPESTATUS[0]}"
say "## rnnlens bench --device gpu"
timeout 240 $bin bench --device gpu --shapes "$shapes" --cells "$cells" --steps 5 --warmup 2 --csv "$out/rnnlens-gpu.csv" "${extra[@]}" 2>&1 \
  | grep -v XDG_RUNTIME_DIR | tee -a "$log"
say "## the GEMM's two kernels, each forced on every product (RNNLENS_GPU_GEMM): 64 x 64 tiles, then 128 x 128"
# (the main run above chose by shape, kernels/gpu/mod.rs gemm_tile; the last column is the
# products alone, whose rate says which kernel wins at which shape)
gshapes=$(echo "$shapes" | tr , '\n' | grep '^ptb\|^c1$\|^c3$' | paste -sd, -)
for t in 64 128; do
  RNNLENS_GPU_GEMM=$t timeout 90 $bin bench --device gpu --shapes "${gshapes:-c1}" --cells lstm,ran-tanh --mode train --steps 5 --warmup 2 \
    --csv "$out/rnnlens-gpu-gemm$t.csv" "${extra[@]}" 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
done
say "## --precision f16: the tensor-core GEMM against the f16-rounding kernels (ignored on lavapipe), then bench on tensor cores and without (RNNLENS_GPU_COOP=0)"
timeout 120 .gpu/gpu-test --ignored tensor_core --nocapture --test-threads 1 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
say "tensor-core test exit status: ${PIPESTATUS[0]}"
for coop in 1 0; do
  RNNLENS_GPU_COOP=$coop timeout 90 $bin bench --device gpu --precision f16 --shapes "${gshapes:-c1}" --cells lstm,ran-tanh --mode train --steps 5 --warmup 2 \
    --csv "$out/rnnlens-gpu-f16-coop$coop.csv" "${extra[@]}" 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
done
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "## PyTorch on CUDA, eager (cuDNN for lstm/gru/rnn)"
  timeout 180 python3 bench/pytorch_bench.py --device cuda --shapes "$shapes" --cells "$cells" --steps 5 --warmup 2 \
    --csv "$out/pytorch-cuda.csv" 2>&1 | tee -a "$log"
  ptb=$(echo "$shapes" | tr , '\n' | grep '^ptb' | paste -sd, -)
  if [ -n "$ptb" ]; then
    say "## PyTorch on CUDA at the PTB shapes in its other precisions: float32 without TF32, TF32 everywhere, float16 AMP (training)"
    timeout 120 python3 bench/pytorch_bench.py --device cuda --shapes "$ptb" --cells lstm,gru,ran-tanh,rwa --mode train \
      --precision f32-strict,tf32,f16 --steps 5 --warmup 2 --csv "$out/pytorch-cuda-precisions.csv" 2>&1 | tee -a "$log"
  fi
  say "## PyTorch on CUDA, the loop cells' step compiled"
  # (the ISAN's compiled step has not run anywhere yet: left out until a session has tried it)
  loops=$(echo "$cells" | tr , '\n' | grep -v '^lstm$\|^gru$\|^rnn$\|^isan$' | paste -sd, -)
  timeout 200 python3 bench/pytorch_bench.py --device cuda --compile --shapes "$shapes" --cells "$loops" --steps 5 --warmup 3 \
    --csv "$out/pytorch-cuda-compile.csv" 2>&1 | tee -a "$log"
else
  say "no CUDA PyTorch here: the PyTorch side is not run"
fi
say "## train --device gpu against --device cpu (this machine's cores), the embedded Brown corpus"
if [ -n "${TRAIN_STEPS:-}" ] || command -v nvidia-smi >/dev/null; then
  steps=${TRAIN_STEPS:-200}
  for dev in gpu cpu; do
    rm -rf "/tmp/rnnlens-train-$dev"
    timeout 110 $bin train --cell lstm --hidden-size 650,650 --embedding-size 650 --dropout 0 --batch-size 20 --bptt 35 \
      --max-steps "$steps" --sample-length 0 --device $dev --out "/tmp/rnnlens-train-$dev" 2>&1 | grep -v XDG_RUNTIME_DIR | grep -v '^epoch' | tee -a "$log"
  done
fi
say "## f16 against f32 on the GPU: the same LSTM language model, validation perplexity (one seed; the issue's three for a longer run)"
if [ -n "${TRAIN_STEPS:-}" ] || command -v nvidia-smi >/dev/null; then
  for p in f32 f16; do
    rm -rf "/tmp/rnnlens-train-$p"
    timeout 100 $bin train --cell lstm --hidden-size 650,650 --embedding-size 650 --dropout 0 --batch-size 20 --bptt 35 \
      --max-steps "${TRAIN_STEPS:-200}" --sample-length 0 --device gpu --precision $p --out "/tmp/rnnlens-train-$p" 2>&1 | grep -v XDG_RUNTIME_DIR | grep -v '^epoch' | tee -a "$log"
  done
fi
python3 bench/gpu_table.py "$out/rnnlens-gpu.csv" "$out/pytorch-cuda.csv" "$out/pytorch-cuda-compile.csv" | tee "$out/table.md" | tee -a "$log"
say "## the precisions (training): rnnlens f32 and f16 beside PyTorch float32, TF32 and float16 AMP"
python3 bench/gpu_table.py --precisions "$out/rnnlens-gpu.csv" "$out/rnnlens-gpu-f16-coop1.csv" "$out/rnnlens-gpu-f16-coop0.csv" \
  "$out/pytorch-cuda-precisions.csv" | tee "$out/table-precisions.md" | tee -a "$log"
# The campaign's slowest rows (docs/paper.md) in the minutes left: the RAN paper's 1024-unit
# language models, in f32 on the GPU, each to its record in $out/paper-records (copy those into
# docs/paper/runs/ and run scripts/paper.sh page). A row the time limit cuts is left unrecorded.
budget=${CHECK_SECONDS:-780}
left=$(( budget - ($(date +%s) - start) ))
say "## the campaign's rows on the GPU (${left} s of the check's ${budget} left): ${PAPER_ROWS:-ran-t1/lstm ran-t1/ran-tanh ran-t1/gru ran-t1/ran-identity ran-t1/rnn}"
if { command -v nvidia-smi >/dev/null || [ -n "${PAPER_ROWS:-}" ]; } && [ "$left" -gt 150 ]; then
  # shellcheck disable=SC2086
  DEVICE=gpu PRECISION=f32 RNNLENS=$bin PAPER_COMMIT=$(cat .gpu/commit 2>/dev/null || echo unknown) PAPER_RUNS="$out/paper-runs" \
    PAPER_RECORDS="$out/paper-records" timeout $(( left - 30 )) python3 scripts/paper.py run ${PAPER_ROWS:-ran-t1/lstm ran-t1/ran-tanh ran-t1/gru ran-t1/ran-identity ran-t1/rnn} 2>&1 | tee -a "$log"
  rm -rf "$out/paper-runs"/*/model/*.safetensors "$out/paper-runs"/*/model/optimizer* 2>/dev/null
  ls "$out/paper-records" 2>/dev/null | tee -a "$log"
fi
say "device check took $(( $(date +%s) - start )) s"
