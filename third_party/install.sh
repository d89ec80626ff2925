#!/usr/bin/env bash
# Installs what third_party/packages.txt lists and this machine lacks, from
# Debian's archive only. Idempotent: a machine that has everything is left
# untouched and the script returns at once. CUDA and NCCL are optional and are
# never installed here; the build detects them under /usr/local/cuda.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages.txt" | grep -v '^$')

missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "third_party: all ${#wanted[@]} packages present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "third_party: missing ${missing[*]}, and this system has no apt-get; install them with your package manager" >&2
  exit 2
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "third_party: missing ${missing[*]}; run this script as root or install sudo" >&2
    exit 2
  fi
fi

echo "third_party: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "third_party: done"
