#!/usr/bin/env bash
# Installs the fulcrum build in BUILD_DIR into a scratch prefix, then builds the
# out-of-tree example plugin with find_package(fulcrum) against that prefix
# and runs its check, which loads the example through the host's loader.
set -euo pipefail
build_dir=$1
example_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$example_dir" -B "$scratch/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" -j2 >/dev/null
# The scratch directories come from mktemp (mode 0700), so the loader's
# permission check passes as it would for a real install.
"$scratch/build/hello_check"
