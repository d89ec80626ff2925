#!/usr/bin/env bash
# Regenerates the README's pictures under docs/img/ from this checkout's build:
#   bash python/make_readme_images.sh [BUILD_DIR]    (default build/release)
# The run picture needs a fulcrum built with LibTorch (fulcrum train); set
# FULCRUM_TRAIN_BIN to another build's bin/fulcrum if this one has none.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build/release}"
plugin="$build/lib/fulcrum/libfulcrum_balancer.so"
train_bin="${FULCRUM_TRAIN_BIN:-$build/bin/fulcrum}"
python="${PYTHON:-/usr/bin/python3}"
[[ -f "$plugin" ]] || { echo "make_readme_images: no plugin at $plugin; build first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
"$python" -m fulcrum.plot plan --plugin "$plugin" --cp 8 --seq-len 65536 --synthetic-docs 1 \
  --out docs/img/plan_compare --formats png --dpi 80
# The quickstart's text, made as the README's main command makes it.
if ! "$train_bin" preprocess --split line:% --output-prefix build/fortunes --input \
    /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature \
    /usr/share/games/fortunes/riddles >"$work/preprocess.log" 2>&1; then
  echo "make_readme_images: $train_bin preprocess failed: $(tail -n 1 "$work/preprocess.log")" >&2
  exit 2
fi
if ! "$train_bin" train --config configs/quickstart.yaml --metrics "$work/run.jsonl" \
    >"$work/train.log" 2>&1; then
  echo "make_readme_images: $train_bin train failed: $(tail -n 1 "$work/train.log")" >&2
  exit 2
fi
"$python" -m fulcrum.plot run "$work/run.jsonl" --out docs/img/quickstart_run --formats png --dpi 80
