#!/usr/bin/env bash
# Installs the fulcrum build in BUILD_DIR into a scratch prefix, builds
# examples/embed against that prefix alone with find_package(fulcrum
# COMPONENTS host), runs it and checks what it says: the installed plugin
# served, and every token of the row, every sample of the batch and every
# token of the scheduled documents was placed exactly once.
set -euo pipefail
build_dir=$1
example_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

# What a C++ framework installs: the contract (sdk), the core and the host
# libraries, and the plugin (its component, runtime, brings the CLI too).
for component in sdk core host runtime; do
  cmake --install "$build_dir" --prefix "$scratch/prefix" --component "$component" >/dev/null
done
cmake -S "$example_dir" -B "$scratch/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" -j2 >/dev/null
# mktemp's directory is mode 0700, so the loader's permission check passes as
# it would for a real install; the example keeps the check on.
"$scratch/build/embed" | tee "$scratch/out.txt"
for line in "plugin: fulcrum" "cp: strategy .*, every token once: yes" \
            "dp: strategy .*, every sample once: yes" \
            "schedule: strategy hybrid, .* slots, every token once: yes"; do
  if ! grep -qx "$line" "$scratch/out.txt"; then
    echo "check_against_install: no line matching '$line' in the example's output" >&2
    exit 1
  fi
done
# A plugin that is not installed is refused, not replaced silently; a file
# that is not a plugin is refused too. Each: one line on stderr, exit 2.
printf 'not a plugin\n' > "$scratch/libfake.so"
for bad in no_such_plugin "$scratch/libfake.so"; do
  rc=0
  "$scratch/build/embed" "$bad" >/dev/null 2>"$scratch/err.txt" || rc=$?
  if [[ $rc -ne 2 || $(wc -l < "$scratch/err.txt") -ne 1 ]] ||
     ! grep -q "^embed: " "$scratch/err.txt"; then
    echo "check_against_install: embed $bad: exit $rc, stderr:" >&2
    cat "$scratch/err.txt" >&2
    exit 1
  fi
done
echo "embed example against the install: ok"
