#!/usr/bin/env bash
# Everything issue 13 measures on a GPU machine, in stages that each fit one
# 10-minute command. Run from the repository root; results go under $OUT (or
# the second argument).
#
#   bash benchmarks/gpu/run_on_gpu.sh bench   [OUT]  # harness: plans, checks, per-rank timings,
#                                                    # tables, fitted H100 profile
#   bash benchmarks/gpu/run_on_gpu.sh runtime [OUT]  # CUDA LibTorch build, quickstart on cuda,
#                                                    # float64 layout equivalence on cuda
#   bash benchmarks/gpu/run_on_gpu.sh torch   [OUT]  # fulcrum.torch against PyTorch's own CP
#                                                    # classes and FlexAttention (pytest)
#
# The machine has no ../shared and no network: prepare the rows here first
# (python3 benchmarks/gpu/prepare.py) and carry benchmarks/gpu/.data with the
# checkout, with build/release/bin/fulcrum and build/release/lib/fulcrum when
# the CLI or the plugin cannot be built there. BENCH_ARGS adds options to
# run.py (e.g. BENCH_ARGS="--rows single_causal_65536 --cp 8").
set -euo pipefail
stage=${1:?usage: run_on_gpu.sh bench|runtime|torch [OUT]}
if [[ $stage != bench && $stage != runtime && $stage != torch ]]; then
  echo "run_on_gpu.sh: unknown stage '$stage'; use bench, runtime or torch" >&2
  exit 2
fi
out=${2:-${OUT:?give OUT as the second argument or in the environment}}
mkdir -p "$out"
py=${PYTHON:-python3}

{
  date -u +"%F %T UTC"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true
} 2>&1 | tee "$out/machine.txt"

case "$stage" in
  bench)
    if [ ! -f benchmarks/gpu/.data/rows.json ]; then
      echo "benchmarks/gpu/.data/rows.json is missing: the rows will be synthetic" |
        tee -a "$out/machine.txt"
    fi
    # shellcheck disable=SC2086
    "$py" benchmarks/gpu/run.py --out "$out/bench" --budget-s "${BUDGET_S:-480}" ${BENCH_ARGS:-}
    ;;
  torch)
    # The tests that need PyTorch's CP classes (they skip on a torch without
    # them), then the adapters' own tests and the parity with PyTorch's
    # balancers, all against this torch. Needs the plugin only.
    export FULCRUM_PLUGIN=${FULCRUM_PLUGIN:-build/release/lib/fulcrum/libfulcrum_balancer.so}
    "$py" -m pytest -q -rs -p no:cacheprovider benchmarks/gpu/tests/test_torch_cp_classes.py \
      python/tests/test_torch_adapters.py python/tests/test_pytorch_parity.py \
      python/tests/test_block_mask.py 2>&1 | tee "$out/torch_tests.txt"
    ;;
  runtime)
    prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    generator=()
    if command -v ninja >/dev/null; then generator=(-G Ninja); fi
    # Tests and benchmarks stay off: GoogleTest and Google Benchmark may be
    # missing there, and the CPU tests run in CI.
    cmake -S . -B build/cuda "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DFULCRUM_BUILD_TESTS=OFF -DFULCRUM_BUILD_BENCHMARKS=OFF \
      > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
    grep "fulcrum:" "$out/configure.log" || true
    cmake --build build/cuda -j"$(nproc)" --target fulcrum fulcrum-worker fulcrum-calibrate \
      > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    bin=build/cuda/bin
    # The quickstart on the GPU: DP 2 x CP 2 sharing one GPU over Gloo.
    "$bin/fulcrum" train --config configs/synthetic.yaml --set train.device=cuda \
      --metrics "$out/quickstart_cuda.jsonl" 2>&1 | tee "$out/quickstart_cuda.log"
    "$bin/fulcrum" train --config configs/synthetic.yaml \
      --metrics "$out/quickstart_cpu.jsonl" 2>&1 | tee "$out/quickstart_cpu.log"
    # float64 layout equivalence on the GPU: one process against DP 2 x CP 2.
    common=(--config configs/synthetic.yaml --set train.device=cuda --set train.dtype=float64
            --set train.steps=3)
    "$bin/fulcrum" train "${common[@]}" --set parallel.dp_size=1 --set parallel.cp_size=1 \
      --save-params "$out/params_1x1.bin" > "$out/layout_1x1.log" 2>&1
    "$bin/fulcrum" train "${common[@]}" --save-params "$out/params_2x2.bin" \
      > "$out/layout_2x2.log" 2>&1
    "$py" benchmarks/gpu/compare_params.py "$out/params_1x1.bin" "$out/params_2x2.bin" |
      tee "$out/layout_equivalence.txt"
    ;;
esac
