#!/usr/bin/env bash
# Installs the SDK component of the fulcrum build in BUILD_DIR into a scratch
# prefix and builds the example plugin against it alone; then installs
# everything into another prefix, builds the
# out-of-tree example plugin with find_package(fulcrum) against that prefix
# and runs its check, which loads the example through the host's loader.
set -euo pipefail
build_dir=$1
example_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

# The SDK component alone: the plugin contract, header-only. The example
# plugin must build from it, and nothing of the core or the host may be there.
cmake --install "$build_dir" --prefix "$scratch/sdk" --component sdk >/dev/null
for unwanted in include/fulcrum/core include/fulcrum/host; do
  if [[ -e "$scratch/sdk/$unwanted" ]]; then
    echo "check_against_install: the sdk component installed $unwanted" >&2
    exit 1
  fi
done
if find "$scratch/sdk" -name '*.a' -o -name '*.so' | grep -q .; then
  echo "check_against_install: the sdk component installed a library" >&2
  exit 1
fi
cmake -S "$example_dir" -B "$scratch/sdk-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$scratch/sdk" >/dev/null
cmake --build "$scratch/sdk-build" -j2 >/dev/null
if ! ls "$scratch/sdk-build"/libfulcrum_hello.so >/dev/null 2>&1; then
  echo "check_against_install: the example plugin did not build against the sdk component" >&2
  exit 1
fi

# Everything: the check loads the plugin through the installed host.
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
cmake -S "$example_dir" -B "$scratch/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" -j2 >/dev/null
# The scratch directories come from mktemp (mode 0700), so the loader's
# permission check passes as it would for a real install.
"$scratch/build/hello_check"
