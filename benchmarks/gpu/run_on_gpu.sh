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
#   bash benchmarks/gpu/run_on_gpu.sh cores   [OUT]  # the runtime build, then issue 21's
#                                                    # scheduler comparison at W = 8, 6, 4
#                                                    # (WORLDS="8 6 4") on the machine's CPU
#                                                    # cores, ../shared/workloads copied there
#
# The runtime's build needs what a PyTorch installation leaves out
# (docs/RESULTS_GPU.md, section 2): DEPS_DEBS, a folder of .deb files unpacked
# into a prefix of their own (Boost.Program_options and its headers when the
# machine has none: apt-get download libboost1.74-dev
# libboost-program-options1.74-dev libboost-program-options1.74.0), and
# GLOO_INCLUDE, a folder holding gloo/ with its config.h, for the Gloo
# revision that LibTorch was built with (pip wheels ship c10d's
# ProcessGroupGloo.hpp but not the gloo headers it includes).
#
# The machine has no ../shared and no network: prepare the rows here first
# (python3 benchmarks/gpu/prepare.py) and carry benchmarks/gpu/.data with the
# checkout, with build/release/bin/fulcrum and build/release/lib/fulcrum when
# the CLI or the plugin cannot be built there. BENCH_ARGS adds options to
# run.py (e.g. BENCH_ARGS="--rows single_causal_65536 --cp 8").
set -euo pipefail
stage=${1:?usage: run_on_gpu.sh bench|runtime|torch|cores [OUT]}
if [[ $stage != bench && $stage != runtime && $stage != torch && $stage != cores ]]; then
  echo "run_on_gpu.sh: unknown stage '$stage'; use bench, runtime, torch or cores" >&2
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
  runtime | cores)
    # The cores stage measures on the shared long-tailed mix; without it
    # hybrid_train.py would quietly take a synthetic one.
    if [ "$stage" = cores ] && [ ! -f ../shared/workloads/dist_wlbllm.json ]; then
      echo "run_on_gpu.sh: ../shared/workloads/dist_wlbllm.json is missing; copy the" \
        "workloads beside the checkout first" >&2
      exit 2
    fi
    prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    export PATH=/usr/local/cuda/bin:$PATH
    extra=(-DCMAKE_PREFIX_PATH="$prefix")
    if [ -n "${DEPS_DEBS:-}" ]; then
      debs=("$DEPS_DEBS"/*.deb)
      if [ ! -f "${debs[0]}" ]; then
        echo "run_on_gpu.sh: DEPS_DEBS=$DEPS_DEBS holds no .deb file; apt-get download the" \
          "packages the header names into it" >&2
        exit 2
      fi
      deps=$(mktemp -d)
      for deb in "${debs[@]}"; do
        if [ ! -f "$deb" ] || ! dpkg -x "$deb" "$deps" 2>/dev/null; then
          echo "run_on_gpu.sh: $deb is not a .deb dpkg can unpack; download it again" >&2
          exit 2
        fi
      done
      extra=(-DCMAKE_PREFIX_PATH="$prefix;$deps/usr")
      boost=("$deps"/usr/lib/*/cmake/Boost-*)
      if [ -d "${boost[0]}" ]; then extra+=(-DBoost_DIR="${boost[0]}"); fi
    fi
    flags=${CXXFLAGS:-}
    if [ -n "${GLOO_INCLUDE:-}" ]; then
      if [ ! -f "$GLOO_INCLUDE/gloo/config.h" ]; then
        echo "run_on_gpu.sh: GLOO_INCLUDE=$GLOO_INCLUDE holds no gloo/config.h; give a folder" \
          "with gloo's headers and a config.h written from its config.h.in" >&2
        exit 2
      fi
      flags="$flags -isystem '$GLOO_INCLUDE'"
    fi
    generator=()
    if command -v ninja >/dev/null; then generator=(-G Ninja); fi
    # Tests and benchmarks stay off: GoogleTest and Google Benchmark may be
    # missing there, and the CPU tests run in CI.
    # CMAKE_POLICY_VERSION_MINIMUM: CMake 4 refuses the old policy versions
    # some installed package files still declare. The CUDA libraries that
    # libtorch_cuda.so needs are other pip packages, found at run time
    # through its RPATH: the linker is not asked to resolve them.
    cmake -S . -B build/cuda "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" \
      -DFULCRUM_BUILD_TESTS=OFF -DFULCRUM_BUILD_BENCHMARKS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
      -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
      > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
    grep "fulcrum:" "$out/configure.log" || true
    started=$(date +%s)
    cmake --build build/cuda -j"$(nproc)" \
      --target fulcrum fulcrum-worker fulcrum-calibrate fulcrum_balancer \
      > "$out/build.log" 2>&1 || { grep -E -A3 "error|FAILED" "$out/build.log" | head -60; exit 1; }
    echo "built in $(( $(date +%s) - started )) s"
    if [ "$stage" = cores ]; then
      # Issue 21's measures where a step's speed holds still: more cores than
      # workers (W <= nproc), nothing else running.
      for w in ${WORLDS:-8 6 4}; do
        PYTHONUNBUFFERED=1 "$py" benchmarks/hybrid_train.py --fulcrum build/cuda/bin/fulcrum \
          --worlds "$w" --first-step 3 --steps 4 --repetitions 5 --profile auto \
          --profile-start "$PWD/configs/profiles/cpu_calibrated.yaml" --refit-every 1 \
          --out "$out/cores_w$w" | tee "$out/cores_w$w.txt"
      done
      exit 0
    fi
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
