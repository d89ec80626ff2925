#!/usr/bin/env bash
# `fulcrum calibrate --config` end to end at tiny size: it trains a hybrid
# job of three ranks with the schedulers compared, fits every cost-model
# term to the whole slots and writes a profile that `fulcrum train` plans
# with, fixed and as the start of balancer.schedule.profile: auto. Bad jobs
# are refused in one line with exit 2 before any worker starts.
#
# Usage: calibrate_job_test.sh /path/to/fulcrum
# Ends with "N passed, 0 failed".
set -u

FULCRUM=${1:?usage: calibrate_job_test.sh /path/to/fulcrum}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PASSED=0

# shellcheck source=cli_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"

job=$WORK/job.yaml
cat >"$job" <<YAML
parallel: {mode: hybrid, world_size: 3, max_tokens_per_rank: 64}
balancer:
  schedule: {strategy: hybrid, profile: cpu_gloo}
  cp: {block_size: 16, mask: causal}
data: {source: synthetic, num_samples: 64, max_length: 192, seq_length: 192, global_batch_size: 8, seed: 1}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 64}
train: {steps: 50, threads: 1}
YAML

profile=$WORK/profile.yaml
run "calibrate --config writes a profile fitted to the job" \
  calibrate --config "$job" --output "$profile" --steps 2 --repetitions 1
[[ $RC -eq 0 ]] || fail "expected exit 0"
keys=$(grep -v '^#' "$profile" | cut -d: -f1 | tr '\n' ' ')
# row_token_seconds and partial_tile_seconds, optional, are written (in that
# order) when the fit gives them a value.
base_keys="name tile_seconds token_seconds slot_seconds kv_bytes_per_token intra_node_bytes_per_second inter_node_bytes_per_second latency_seconds ranks_per_node "
[[ $keys == "$base_keys" || $keys == "${base_keys}row_token_seconds " ||
  $keys == "${base_keys}partial_tile_seconds " ||
  $keys == "${base_keys}row_token_seconds partial_tile_seconds " ]] ||
  fail "keys are '$keys'"
grep -q '^#   r = [0-9.e+-]* s per token of the slot.s row' "$profile" || fail "no row term line"
# The job's rows record their partial tiles (a causal mask at B = 16 has
# both kinds), so the term is fitted, not kept.
grep -q '^#   r = .*, f = [0-9.e+-]* s per partial tile,$' "$profile" ||
  fail "no fitted partial-tile term in the fit line"
grep -q '^name: job_calibrated$' "$profile" || fail "no 'name: job_calibrated'"
# The model's K and V of one token: 2 x hidden 16 x 1 layer x 4 bytes.
grep -q '^kv_bytes_per_token: 1.280000e+02$' "$profile" || fail "kv_bytes_per_token is not 128"
grep -q "^# fulcrum calibrate --config $job --steps 2 --repetitions 1" "$profile" ||
  fail "no provenance comment naming the job"
grep -q '^# Rows: [1-9][0-9]* slot members of steps 2..2' "$profile" || fail "no row count"
grep -q '^#   per-row error: median |e| [0-9.]*%, max [0-9.]*%' "$profile" || fail "no fit error"
grep -q 'per-row error' "$WORK/err" || fail "the fit's error is not reported"
PASSED=$((PASSED + 1))

run "train plans with the job's profile" \
  train --config "$job" --set train.steps=2 --set "balancer.schedule.profile=$profile"
[[ $RC -eq 0 ]] || fail "expected exit 0"
grep -q "by profile $profile" "$WORK/out" || fail "the summary does not name the profile"
PASSED=$((PASSED + 1))

run "profile: auto starts from it and refits" \
  train --config "$job" --set train.steps=3 --set balancer.schedule.profile=auto \
  --set "balancer.schedule.profile_start=$profile" --set balancer.schedule.refit_every=1 \
  --metrics "$WORK/m.jsonl"
[[ $RC -eq 0 ]] || fail "expected exit 0"
# Refits after steps 2 and 3; step 1 is a warm-up, left out.
grep -q "by profile auto (start $profile, refit every 1 steps, 2 refits so far, the last on [0-9]* slot members: median |error| [0-9]*%, max [0-9]*%)" "$WORK/out" ||
  fail "the summary does not say the profile was refitted twice"
[[ $(grep -c '"refitted":true' "$WORK/m.jsonl") -eq 2 ]] || fail "no refitted record per step"
PASSED=$((PASSED + 1))

expect_refusal "a fixed-mode job runs no slots" "runs no slots to time" \
  calibrate --config "$job" --set parallel.mode=fixed --set parallel.world_size=0
expect_refusal "one rank exchanges nothing" "runs on 1 rank" \
  calibrate --config "$job" --set parallel.world_size=1 --set parallel.max_tokens_per_rank=192
expect_refusal "one step is only the warm-up" "--steps must be an integer from 2 to 50" \
  calibrate --config "$job" --steps 1
expect_refusal "--steps without --config" "read only with --config" \
  calibrate --output "$WORK/x.yaml" --steps 3
[[ -e $WORK/x.yaml ]] && fail "a refused run wrote a profile"

echo "$PASSED passed, 0 failed"
