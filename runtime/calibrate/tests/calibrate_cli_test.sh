#!/usr/bin/env bash
# `fulcrum calibrate` and the device/backend settings of `fulcrum train`, as a
# user meets them: a profile written with exactly CostProfile's keys, an
# existing file kept without --force, and bad input refused in one line with
# exit 2 before anything runs. Needs a build with LibTorch (fulcrum-calibrate).
#
# Usage: calibrate_cli_test.sh /path/to/fulcrum /path/to/configs/quickstart.yaml
# Ends with "N passed, 0 failed".
set -u

FULCRUM=${1:?usage: calibrate_cli_test.sh /path/to/fulcrum quickstart.yaml}
QUICKSTART=${2:?usage: calibrate_cli_test.sh /path/to/fulcrum quickstart.yaml}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PASSED=0

# shellcheck source=cli_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"

profile=$WORK/profile.yaml
run "calibrate writes a profile" calibrate --output "$profile" --repetitions 1 --name test_profile
[[ $RC -eq 0 ]] || fail "expected exit 0"
keys=$(grep -v '^#' "$profile" | cut -d: -f1 | tr '\n' ' ')
[[ $keys == "name tile_seconds token_seconds slot_seconds kv_bytes_per_token intra_node_bytes_per_second inter_node_bytes_per_second latency_seconds ranks_per_node " ]] ||
  fail "keys are '$keys'"
grep -q '^name: test_profile$' "$profile" || fail "no 'name: test_profile'"
grep -q '^tile_seconds: [0-9]' "$profile" || fail "tile_seconds is not a number >= 0"
grep -q "^# fulcrum calibrate --output $profile" "$profile" || fail "no provenance comment"
for leftover in "$profile".tmp.*; do
  [[ -e $leftover ]] && fail "a temporary file was left beside the profile: $leftover"
done
PASSED=$((PASSED + 1))

before=$(cat "$profile")
expect_refusal "an existing profile needs --force" "pass --force" \
  calibrate --output "$profile" --repetitions 1
[[ $(cat "$profile") == "$before" ]] || fail "the refused run changed the file"
expect_refusal "missing --output" "--output FILE.yaml is required" calibrate
mkfifo "$WORK/fifo"
expect_refusal "--force never replaces a FIFO" "is not a regular file" \
  calibrate --output "$WORK/fifo" --force
[[ -p "$WORK/fifo" ]] || fail "the FIFO was replaced"
expect_refusal "--force never replaces a device" "is not a regular file" \
  calibrate --output /dev/null --force
[[ -c /dev/null ]] || fail "/dev/null was replaced"
expect_refusal "missing directory" "does not exist" calibrate --output "$WORK/no/such/p.yaml"
expect_refusal "--output is a directory" "is a directory" calibrate --output "$WORK"
expect_refusal "zero repetitions" "--repetitions must be an integer from 1 to 20" \
  calibrate --output "$WORK/p2.yaml" --repetitions 0
expect_refusal "repetitions past the bound, with the estimate" \
  "--repetitions 1000 would take about 53 min, more than the 20" \
  calibrate --output "$WORK/p2.yaml" --repetitions 1000
expect_refusal "a name with a space" "--name 'a b'" calibrate --output "$WORK/p2.yaml" --name "a b"
[[ -e $WORK/p2.yaml ]] && fail "a refused run wrote a profile"

# A write that fails for want of space says so, not "permissions": a file
# size limit of 0 stands in for a full disk (EFBIG, with SIGXFSZ ignored as a
# full disk raises none). stderr leaves through a pipe: the limit would stop
# a write to a file too.
CHECK="a full disk is not a permissions problem"
(trap '' XFSZ; ulimit -f 0; exec "$FULCRUM" calibrate --output "$WORK/full.yaml" \
  --repetitions 1) 2>&1 >/dev/null | cat >"$WORK/err"
RC=${PIPESTATUS[0]}
[[ $RC -eq 2 ]] || fail "expected exit 2"
# (besides calibrate's warning about a busy machine, which is not an error)
[[ $(grep -vc ': warning: ' "$WORK/err") -eq 1 ]] || fail "expected exactly one error line"
grep -q "cannot write .*full.yaml.tmp.*: File too large; free space" "$WORK/err" ||
  fail "the refusal does not give the cause"
grep -q "permissions" "$WORK/err" && fail "a full disk is reported as a permissions problem"
for leftover in "$WORK"/full.yaml*; do
  [[ -e $leftover ]] && fail "a file was left behind: $leftover"
done
PASSED=$((PASSED + 1))

# Stopped while the workers measure: exit 128 + signal and one line saying
# so, not "internal error". SIGTERM, because a background job of a
# non-interactive shell starts with SIGINT ignored, and so would its workers.
CHECK="interrupted calibration"
"$FULCRUM" calibrate --output "$WORK/int.yaml" --repetitions 20 >"$WORK/out" 2>"$WORK/err" &
pid=$!
for _ in $(seq 600); do
  pgrep -P "$pid" >/dev/null && break
  sleep 0.1
done
pgrep -P "$pid" >/dev/null || fail "no worker started"
kill -TERM "$pid"
wait "$pid"
RC=$?
[[ $RC -eq 143 ]] || fail "expected exit 143"
last=$(grep -v -e '^\[' -e ': warning: ' "$WORK/err")
[[ $(printf '%s\n' "$last" | wc -l) -eq 1 ]] || fail "expected one line of the command's own"
grep -q "^fulcrum calibrate: interrupted by SIGTERM while measuring compute; no profile" \
  "$WORK/err" || fail "the line does not say it was interrupted"
grep -q "internal error" "$WORK/err" && fail "an interruption is called an internal error"
[[ -e $WORK/int.yaml ]] && fail "an interrupted run wrote a profile"
PASSED=$((PASSED + 1))

expect_refusal "nccl without cuda" "nccl communicates CUDA tensors only" \
  train --config "$QUICKSTART" --set dist.backend=nccl
expect_refusal "an unknown device" "train.device must be one of cpu, cuda" \
  train --config "$QUICKSTART" --set train.device=gpu
if [[ ! -d /proc/driver/nvidia/gpus ]]; then
  expect_refusal "cuda without a GPU" "train.device is cuda" \
    train --config "$QUICKSTART" --set train.device=cuda
fi

echo "$PASSED passed, 0 failed"
