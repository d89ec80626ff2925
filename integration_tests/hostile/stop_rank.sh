#!/usr/bin/env bash
# Stops one rank of a DP 2 x CP 2 training job with SIGSTOP after step 1 and
# prints the launcher's verdict and the seconds from the stop to its exit
# (dist.op_timeout_s is 3). The figures of docs/RELIABILITY.md, "A stopped
# rank", come from:
#   for r in 0 1 2 3; do integration_tests/hostile/stop_rank.sh build/release/bin/fulcrum $r; done
set -u
FULCRUM=${1:?usage: stop_rank.sh /path/to/fulcrum RANK}
RANK_TO_STOP=${2:?usage: stop_rank.sh /path/to/fulcrum RANK}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/job.yaml" <<'YAML'
parallel: {dp_size: 2, cp_size: 2}
balancer: {cp: {strategy: auto, block_size: 16}, dp: {strategy: auto, cost: attention}}
data: {source: synthetic, num_samples: 64, max_length: 120, seq_length: 64, packing: true,
       global_batch_size: 4, micro_batch_size: 1, seed: 3}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 64}
train: {steps: 200, threads: 1}
dist: {timeout_s: 5, op_timeout_s: 3}
YAML
"$FULCRUM" train --config "$WORK/job.yaml" >"$WORK/out" 2>"$WORK/err" &
launcher=$!
for _ in $(seq 1 600); do
  grep -q "step 1/" "$WORK/out" 2>/dev/null && break
  sleep 0.05
done
# Somewhere inside a later step, not just at its start.
sleep "0.$((RANDOM % 10))"
for pid in $(pgrep -P "$launcher"); do
  rank=$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^RANK=//p')
  [[ $rank == "$RANK_TO_STOP" ]] && kill -STOP "$pid"
done
start=$(date +%s.%N)
wait "$launcher"
code=$?
end=$(date +%s.%N)
printf 'rank %s stopped: exit %s after %.2f s: %s\n' "$RANK_TO_STOP" "$code" \
  "$(echo "$end - $start" | bc)" "$(tail -n 1 "$WORK/err")"
