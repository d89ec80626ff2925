#!/usr/bin/env bash
# The fulcrum CLI contract, exercised as a user would: known answers, JSON
# shape, fallbacks, config defaults, and bad input (exit 2, exactly one line
# on stderr, nothing on stdout, never a crash).
#
# Usage: cli_test.sh /path/to/fulcrum
# Stops at the first failure, naming the check; ends with "N passed, 0 failed".
set -u

FULCRUM=${1:?usage: cli_test.sh /path/to/fulcrum}
if [[ ! -x "$FULCRUM" ]]; then
  echo "cli_test: '$FULCRUM' is not an executable" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "cli_test: python3 is needed to read JSON" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
PASSED=0

fail() {
  echo "FAIL: $CHECK: $*" >&2
  echo "  command: fulcrum ${ARGS[*]}" >&2
  echo "  exit code: $RC" >&2
  echo "  stdout (first lines):" >&2
  head -n 15 "$OUT" | sed 's/^/    /' >&2
  echo "  stderr:" >&2
  sed 's/^/    /' "$ERR" >&2
  echo "$PASSED passed, 1 failed" >&2
  exit 1
}

pass() { PASSED=$((PASSED + 1)); }

# run NAME ARGS...: runs fulcrum, leaving RC, $OUT and $ERR.
run() {
  CHECK=$1
  shift
  ARGS=("$@")
  "$FULCRUM" "$@" >"$OUT" 2>"$ERR"
  RC=$?
}

# Evaluates a Python expression over the JSON on stdout (bound to j); fails
# the check when it is false or the output is not JSON.
json_check() {
  local what=$1 expr=$2
  if ! python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if ('"$expr"') else 1)
' "$OUT" 2>>"$ERR"; then
    fail "$what"
  fi
}

expect_ok() {
  run "$@"
  [[ $RC -eq 0 ]] || fail "expected exit code 0"
}

# expect_usage NAME PREFIX ARGS...: exit 2, one stderr line starting with
# PREFIX and holding a "; what to do" part, empty stdout, no crash trace.
expect_usage() {
  local name=$1 prefix=$2
  shift 2
  run "$name" "$@"
  [[ $RC -eq 2 ]] || fail "expected exit code 2"
  local lines
  lines=$(wc -l <"$ERR")
  [[ $lines -eq 1 ]] || fail "expected exactly one line on stderr, got $lines"
  [[ $(head -c ${#prefix} "$ERR") == "$prefix" ]] || fail "stderr does not start with '$prefix'"
  grep -q '; ' "$ERR" || fail "stderr does not say what to do ('; ...')"
  if grep -qiE 'terminate|what\(\)|abort|exception|segmentation' "$ERR"; then
    fail "stderr looks like a crash"
  fi
  [[ ! -s "$OUT" ]] || fail "expected nothing on stdout"
  pass
}

# ---------------------------------------------------------------- basics
expect_ok "version" --version
grep -qE '^fulcrum [0-9]+\.[0-9]+\.[0-9]+' "$OUT" || fail "no version line"
pass

expect_ok "top-level help" --help
grep -q 'plan' "$OUT" && grep -q 'dp-partition' "$OUT" && grep -q 'schedule' "$OUT" ||
  fail "help does not list the commands"
pass

expect_ok "plan help" plan --help
for option in --cp --strategy --block-size --mask --seq-len --doc-lengths --doc-lengths-file \
  --synthetic-docs --positions --compare --format --config --set --plugin; do
  grep -q -- "$option" "$OUT" || fail "plan --help does not mention $option"
done
pass

expect_ok "dp-partition help" dp-partition --help
for option in --dp --strategy --equal-count --cost --lengths --lengths-file --format; do
  grep -q -- "$option" "$OUT" || fail "dp-partition --help does not mention $option"
done
pass

# A hybrid job's worker count is parallel.world_size, not dp_size x cp_size.
expect_ok "train help" train --help
grep -q -- "--nproc N.*parallel.world_size" <(tr -s ' \n' ' ' <"$OUT") ||
  fail "train --help does not say that --nproc follows parallel.world_size"
pass

# ---------------------------------------------------------------- plan: known answers
expect_ok "head_tail known answer" plan --cp 2 --strategy head_tail --seq-len 8 --positions \
  --format json
json_check "rank 0 positions are [0,1,6,7], PyTorch's order" 'j["ranks"][0]["positions"] == [0, 1, 6, 7]'
json_check "rank 1 positions are [2,3,4,5]" 'j["ranks"][1]["positions"] == [2, 3, 4, 5]'
json_check "head_tail served, no fallback" \
  'j["requested"] == "head_tail" and j["used"] == "head_tail" and j["fallback_reason"] is None'
json_check "head_tail is exactly pair-balanced" \
  'j["imbalance"]["pairs"] == 1.0 and j["ranks"][0]["pairs"] == j["ranks"][1]["pairs"] == 18'
json_check "plan JSON has every documented field" \
  'all(k in j for k in ["requested", "used", "fallback_reason", "cp", "block_size", "tokens",
   "padding", "ranks", "imbalance", "tiles_over_ideal", "plan_time_us"])
   and all(set(r) == {"rank", "tokens", "pairs", "tiles", "positions"} for r in j["ranks"])'
pass

expect_ok "positions only with --positions" plan --cp 2 --strategy head_tail --seq-len 8 \
  --format json
json_check "no positions without --positions" 'all("positions" not in r for r in j["ranks"])'
pass

expect_ok "head_tail falls back on N % 2P != 0" plan --cp 2 --strategy head_tail --seq-len 10 \
  --positions --format json
json_check "used contiguous with a reason" \
  'j["requested"] == "head_tail" and j["used"] == "contiguous"
   and isinstance(j["fallback_reason"], str) and "10" in j["fallback_reason"]'
json_check "contiguous positions" \
  'j["ranks"][0]["positions"] == [0, 1, 2, 3, 4] and j["ranks"][1]["positions"] == [5, 6, 7, 8, 9]'
pass

expect_ok "head_tail order in the table" plan --cp 2 --strategy head_tail --seq-len 8 --positions
grep -qxF 'order        [0,1,6,7 | 2,3,4,5]' "$OUT" || fail "table lacks PyTorch's head-tail order"
pass

expect_ok "pads in the table's order" plan --cp 3 --strategy contiguous --seq-len 7 --positions
grep -qxF 'order        [0,1,2 | 3,4,5 | 6,pad,pad]' "$OUT" || fail "table order without pads"
pass

expect_ok "no order line for a large plan" plan --cp 2 --strategy head_tail --seq-len 4096 \
  --positions
grep -q '^order' "$OUT" && fail "4096 positions listed one by one"
pass

expect_ok "fallback in the table" plan --cp 2 --strategy head_tail --seq-len 10
grep -q 'contiguous' "$OUT" && grep -q 'requested head_tail' "$OUT" || fail "table hides the fallback"
pass

expect_ok "fewer tokens than ranks" plan --cp 8 --strategy contiguous --seq-len 3 --positions \
  --format json
json_check "padded plan" \
  'j["padding"] == 5 and sum(r["tokens"] for r in j["ranks"]) == 3
   and sorted(p for r in j["ranks"] for p in r["positions"]) == [-1] * 5 + [0, 1, 2]'
pass

expect_ok "packed documents from a list" plan --cp 4 --strategy auto --doc-lengths 100,7,300,1 \
  --mask causal --block-size 16 --positions --format json
json_check "a permutation of the row plus padding, equal shards" \
  'j["tokens"] == 408 and j["block_size"] == 16
   and len({len(r["positions"]) for r in j["ranks"]}) == 1
   and sorted(p for r in j["ranks"] for p in r["positions"] if p >= 0) == list(range(408))
   and sum(1 for r in j["ranks"] for p in r["positions"] if p < 0) == j["padding"]'
pass

printf '[4096, 812, 77]\n' >"$WORK/docs.json"
expect_ok "packed documents from a file" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/docs.json" --mask sliding:64 --format json
json_check "tokens add up" 'j["tokens"] == 4985 and j["cp"] == 2'
pass

expect_ok "synthetic documents" plan --cp 8 --strategy balanced --seq-len 65536 \
  --synthetic-docs 7 --format json
json_check "synthetic row fills N" 'j["tokens"] == 65536 and j["imbalance"]["pairs"] >= 1.0'
cp "$OUT" "$WORK/synthetic_a.json"
expect_ok "synthetic documents are deterministic" plan --cp 8 --strategy balanced --seq-len 65536 \
  --synthetic-docs 7 --format json
python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if a["ranks"] == b["ranks"] else 1)' "$WORK/synthetic_a.json" "$OUT" ||
  fail "two runs with one seed differ"
pass

# ---------------------------------------------------------------- plan --compare
expect_ok "compare lists every strategy" plan --compare --cp 2 --seq-len 10 --format json
json_check "compare JSON shape" \
  'set(j) == {"workload", "strategies"} and j["workload"]["tokens"] == 10
   and len(j["strategies"]) >= 2'
json_check "every strategy once, contiguous and head_tail among them" \
  'len({s["requested"] for s in j["strategies"]}) == len(j["strategies"])
   and {"contiguous", "head_tail"} <= {s["requested"] for s in j["strategies"]}'
json_check "inapplicable head_tail shows its fallback and reason" \
  'any(s["requested"] == "head_tail" and s["used"] != "head_tail" and s["fallback_reason"]
       for s in j["strategies"])'
STRATEGIES=$(python3 -c '
import json, sys
print(" ".join(s["requested"] for s in json.load(open(sys.argv[1]))["strategies"]))' "$OUT")
pass

expect_ok "compare table has a row per strategy" plan --compare --cp 2 --seq-len 10
for s in $STRATEGIES; do
  grep -qE "^$s " "$OUT" || fail "no table row for strategy '$s'"
done
grep -q 'pairs imb' "$OUT" && grep -q 'tiles/ideal' "$OUT" || fail "table header missing"
pass

# ---------------------------------------------------------------- config and plugin
printf 'parallel:\n  cp_size: 4\nbalancer:\n  cp:\n    strategy: head_tail\n    block_size: 32\n' \
  >"$WORK/good.yaml"
expect_ok "config supplies defaults" plan --config "$WORK/good.yaml" --seq-len 64 --format json
json_check "cp, strategy and block size from the config" \
  'j["cp"] == 4 and j["requested"] == "head_tail" and j["block_size"] == 32'
pass

expect_ok "flags and --set win over the config" plan --config "$WORK/good.yaml" --cp 2 \
  --set balancer.cp.block_size=8 --seq-len 64 --format json
json_check "explicit values win" 'j["cp"] == 2 and j["block_size"] == 8'
pass

expect_ok "builtin balancer" plan --plugin builtin --cp 2 --strategy head_tail --seq-len 8 \
  --format json
json_check "builtin serves contiguous and says why" \
  'j["used"] == "contiguous" and j["fallback_reason"]'
pass

# A plugin the user names is the one used: absent, it is refused with where
# it was looked for, never replaced by the built-in balancer.
expect_usage "named plugin absent by path" "fulcrum plan: " plan --plugin "$WORK/no_such_plugin.so" --cp 2 \
  --strategy contiguous --seq-len 8 --format json
grep -q "no_such_plugin.so" "$ERR" || fail "the refusal does not name the plugin"
expect_usage "named plugin absent by name" "fulcrum plan: " plan --plugin no_such_plugin --cp 2 \
  --strategy contiguous --seq-len 8 --set balancer.plugin_dirs="$WORK"
grep -q "$WORK" "$ERR" || fail "the refusal does not give the search path"
# Not named (balancer.plugin absent) and the default plugin not installed
# beside this copy of the CLI: the built-in balancer serves, loudly.
mkdir -p "$WORK/alone/bin"
cp "$FULCRUM" "$WORK/alone/bin/fulcrum"
CHECK="default plugin absent falls back loudly"
FULCRUM_PLUGIN_PATH= "$WORK/alone/bin/fulcrum" plan --cp 2 --strategy contiguous --seq-len 8 \
  --format json >"$OUT" 2>"$ERR"
RC=$?
[[ $RC -eq 0 ]] || fail "expected exit code 0"
grep -q "warning: could not load the default plugin 'fulcrum_balancer'" "$ERR" ||
  fail "no warning about the absent default plugin"
json_check "planned by the built-in balancer" 'j["used"] == "contiguous"'
pass

# One name per concept: plan takes --lengths / --lengths-file as dp-partition
# and schedule do; --doc-lengths / --doc-lengths-file stay as its earlier names.
printf '[40, 24]' >"$WORK/row.json"
for form in "--lengths 40,24" "--doc-lengths 40,24" "--lengths-file $WORK/row.json" \
            "--doc-lengths-file $WORK/row.json"; do
  # shellcheck disable=SC2086
  expect_ok "plan $form" plan --plugin builtin --cp 2 --strategy contiguous $form --format json
  json_check "the row of two documents" 'j["tokens"] == 64 and j["ranks"][0]["pairs"] == 32 * 33 // 2'
  pass
done
expect_usage "old and new names together" "fulcrum plan: " plan --cp 2 --strategy contiguous \
  --lengths 40,24 --doc-lengths 40,24
grep -q "more than one row given" "$ERR" || fail "two rows not refused"
run "an item named with the flag given" plan --cp 2 --strategy contiguous --doc-lengths 5,a
grep -q "^fulcrum plan: --doc-lengths: item 2" "$ERR" || fail "the message does not name --doc-lengths"

# A plugin directory longer than a short string's inline buffer: the list is
# split from a copy that lives as long as the search does.
PLUGIN_FILE="$(dirname "$FULCRUM")/../lib/fulcrum/libfulcrum_balancer.so"
if [[ -f "$PLUGIN_FILE" ]]; then
  LONG_DIR="$WORK/a_plugin_directory_past_any_inline_buffer"
  mkdir -p "$LONG_DIR"
  chmod 755 "$LONG_DIR"
  cp "$PLUGIN_FILE" "$LONG_DIR/libfulcrum_copy.so"
  expect_ok "long balancer.plugin_dirs entry" plan --plugin fulcrum_copy --cp 2 \
    --set "balancer.plugin_dirs=$WORK/none:$LONG_DIR" --strategy head_tail --seq-len 8 --format json
  [[ ! -s "$ERR" ]] || fail "the plugin in the long directory was not loaded"
  json_check "the plugin, not the built-in balancer, served" 'j["used"] == "head_tail"'
  pass
fi

# ---------------------------------------------------------------- dp-partition
expect_ok "dp-partition covers every sample" dp-partition --dp 3 --strategy auto \
  --lengths 5,900,17,4096,33,250,1,77 --format json
json_check "dp JSON shape" \
  'set(j) == {"strategy", "cost", "ranks", "imbalance", "lower_bound"} and j["cost"] == "tokens"
   and all(set(r) == {"rank", "samples", "cost"} for r in j["ranks"]) and len(j["ranks"]) == 3'
json_check "each index exactly once" \
  'sorted(i for r in j["ranks"] for i in r["samples"]) == list(range(8))'
json_check "costs, imbalance and bound agree" \
  'abs(sum(r["cost"] for r in j["ranks"]) - 5379) < 1e-6 and j["imbalance"] >= 1.0
   and j["lower_bound"] <= max(r["cost"] for r in j["ranks"]) + 1e-6 and j["lower_bound"] >= 4096'
pass

printf '[10, 20, 30, 40, 50]' >"$WORK/lengths.json"
expect_ok "dp-partition from a file, attention cost, equal count" dp-partition --dp 2 \
  --strategy auto --equal-count --cost attention:0 --lengths-file "$WORK/lengths.json" \
  --format json
json_check "attention:0 costs L^2, counts 2 and 3" \
  'abs(sum(r["cost"] for r in j["ranks"]) - 5500) < 1e-6
   and sorted(len(r["samples"]) for r in j["ranks"]) == [2, 3] and j["cost"] == "attention:0"'
pass

expect_ok "dp-partition table" dp-partition --dp 2 --strategy round_robin --lengths 1,2,3
grep -q 'imbalance' "$OUT" && grep -q 'round_robin' "$OUT" || fail "table lacks the summary"
pass

# ---------------------------------------------------------------- bad input: plan
P="fulcrum plan: "
expect_usage "P = 0" "$P" plan --cp 0 --strategy contiguous --seq-len 8
expect_usage "P < 0" "$P" plan --cp=-1 --strategy contiguous --seq-len 8
expect_usage "P not numeric" "$P" plan --cp abc --strategy contiguous --seq-len 8
expect_usage "P trailing junk" "$P" plan --cp 12abc --strategy contiguous --seq-len 8
expect_usage "P overflow" "$P" plan --cp 99999999999999999999999 --strategy contiguous --seq-len 8
expect_usage "N = 0" "$P" plan --cp 2 --strategy contiguous --seq-len 0
expect_usage "N not numeric" "$P" plan --cp 2 --strategy contiguous --seq-len 1e5
expect_usage "N too long" "$P" plan --cp 2 --strategy contiguous --seq-len 9223372036854775807
expect_usage "block size 0" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --block-size 0
expect_usage "unknown strategy" "$P" plan --cp 2 --strategy zigzagg --seq-len 8
expect_usage "unknown mask" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --mask diagonal
expect_usage "bad sliding window" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --mask sliding:0
expect_usage "empty lengths" "$P" plan --cp 2 --strategy contiguous --doc-lengths ""
expect_usage "empty item" "$P" plan --cp 2 --strategy contiguous --doc-lengths 1,,2
expect_usage "trailing comma" "$P" plan --cp 2 --strategy contiguous --doc-lengths 1,2,
expect_usage "zero length" "$P" plan --cp 2 --strategy contiguous --doc-lengths 4,0
expect_usage "negative length" "$P" plan --cp 2 --strategy contiguous --doc-lengths 4,-2
expect_usage "non-numeric length" "$P" plan --cp 2 --strategy contiguous --doc-lengths 4,x
expect_usage "lengths overflow" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths 9223372036854775807,9223372036854775807
expect_usage "missing lengths file" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/missing.json"
printf '[1, 2,' >"$WORK/malformed.json"
expect_usage "malformed JSON" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/malformed.json"
grep -q 'byte' "$ERR" || fail "malformed JSON error does not give the byte position"
printf '{"lengths": [1, 2]}' >"$WORK/object.json"
expect_usage "JSON object, not a list" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/object.json"
printf '[1, 2.5]' >"$WORK/float.json"
expect_usage "JSON float" "$P" plan --cp 2 --strategy contiguous --doc-lengths-file "$WORK/float.json"
printf '[1, -3]' >"$WORK/negative.json"
expect_usage "JSON negative" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/negative.json"
printf '[1, "2"]' >"$WORK/string.json"
expect_usage "JSON string item" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/string.json"
printf '[]' >"$WORK/empty.json"
expect_usage "JSON empty list" "$P" plan --cp 2 --strategy contiguous \
  --doc-lengths-file "$WORK/empty.json"
expect_usage "both row options" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --doc-lengths 8
expect_usage "neither row option" "$P" plan --cp 2 --strategy contiguous
expect_usage "synthetic without seq-len" "$P" plan --cp 2 --strategy contiguous --doc-lengths 8 \
  --synthetic-docs 1
expect_usage "bad seed" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --synthetic-docs -1
expect_usage "unknown flag" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --frobnicate
expect_usage "abbreviated flag" "$P" plan --cp 2 --strat contiguous --seq-len 8
expect_usage "stray argument" "$P" plan --cp 2 --strategy contiguous --seq-len 8 extra
expect_usage "missing flag value" "$P" plan --cp 2 --strategy contiguous --seq-len
grep -q "^fulcrum plan: --seq-len needs a value;" "$ERR" || fail "not said as a missing value"
# An optional flag without its value is not called required.
expect_usage "--config without a value" "$P" plan --cp 2 --seq-len 8 --config
grep -q "^fulcrum plan: --config needs a value;" "$ERR" || fail "not said as a missing value"
grep -q "required" "$ERR" && fail "an optional --config called required"
expect_usage "flag given twice" "$P" plan --cp 2 --cp 4 --strategy contiguous --seq-len 8
expect_usage "bad format" "$P" plan --cp 2 --strategy contiguous --seq-len 8 --format xml
expect_usage "missing config" "$P" plan --config "$WORK/missing.yaml" --seq-len 8
printf 'parallel:\n  cp_sise: 4\n' >"$WORK/typo.yaml"
expect_usage "config typo" "$P" plan --config "$WORK/typo.yaml" --seq-len 8
grep -q "typo.yaml:2:3: unknown key 'parallel.cp_sise'; did you mean 'parallel.cp_size'?" "$ERR" ||
  fail "config typo not reported with line:col and suggestion"
expect_usage "malformed --set" "$P" plan --set foo --seq-len 8
expect_usage "bad --set value" "$P" plan --set parallel.cp_size=abc --seq-len 8
expect_usage "unknown fallback in config" "$P" plan --set balancer.cp.fallback=nope --cp 2 \
  --strategy head_tail --seq-len 10

# ---------------------------------------------------------------- bad input: dp-partition
D="fulcrum dp-partition: "
expect_usage "K = 0" "$D" dp-partition --dp 0 --strategy auto --lengths 1,2
expect_usage "K not numeric" "$D" dp-partition --dp two --strategy auto --lengths 1,2
expect_usage "dp empty lengths" "$D" dp-partition --dp 2 --strategy auto --lengths ""
expect_usage "dp zero length" "$D" dp-partition --dp 2 --strategy auto --lengths 1,0
expect_usage "dp non-numeric length" "$D" dp-partition --dp 2 --strategy auto --lengths 1,2x
expect_usage "dp missing file" "$D" dp-partition --dp 2 --strategy auto \
  --lengths-file "$WORK/missing.json"
expect_usage "dp malformed file" "$D" dp-partition --dp 2 --strategy auto \
  --lengths-file "$WORK/malformed.json"
expect_usage "dp unknown strategy" "$D" dp-partition --dp 2 --strategy best --lengths 1,2
expect_usage "dp unknown cost" "$D" dp-partition --dp 2 --strategy auto --cost flops --lengths 1,2
expect_usage "dp negative A" "$D" dp-partition --dp 2 --strategy auto --cost attention:-1 \
  --lengths 1,2
expect_usage "dp both length options" "$D" dp-partition --dp 2 --strategy auto --lengths 1 \
  --lengths-file "$WORK/lengths.json"
expect_usage "dp neither length option" "$D" dp-partition --dp 2 --strategy auto
expect_usage "dp unknown flag" "$D" dp-partition --dp 2 --strategy auto --lengths 1 --verbose

# ---------------------------------------------------------------- schedule
expect_ok "schedule help" schedule --help
for option in --world --max-tokens-per-rank --lengths --lengths-file --strategy --cp --profile \
  --block-size --mask --compare --format --config --set --plugin; do
  grep -q -- "$option" "$OUT" || fail "schedule --help does not mention $option"
done
pass

S4="--world 4 --max-tokens-per-rank 1000"
expect_ok "schedule JSON" schedule $S4 --lengths 2500,1800,900,700,400 --strategy fixed \
  --profile h100_7b --format json
json_check "schedule JSON shape" \
  'list(j) == ["request", "requested", "used", "fallback_reason", "slots", "ranks", "waves",
               "step_seconds", "lower_bound_seconds", "step_over_bound", "bytes_moved",
               "allgather_bytes", "plan_time_us"]'
json_check "request echoed" \
  'j["request"]["world"] == 4 and j["request"]["max_tokens_per_rank"] == 1000 and
   j["request"]["documents"] == 5 and j["request"]["tokens"] == 6300 and
   j["request"]["profile"] == "h100_7b" and j["used"] == "fixed" and j["fallback_reason"] is None'
# Independent recount from the JSON alone: every document once, whole (none
# is longer than W x T), members distinct and within [0, W), at most T tokens
# each, one slot per rank per wave.
json_check "slots cover the batch within the budget" '
  sorted((d["doc"], d["offset"], d["length"]) for s in j["slots"] for d in s["documents"]) ==
    sorted([(0, 0, 2500), (1, 0, 1800), (2, 0, 900), (3, 0, 700), (4, 0, 400)]) and
  all(len(set(s["group"])) == len(s["group"]) and all(0 <= r < 4 for r in s["group"])
      for s in j["slots"]) and
  all(m["tokens"] <= 1000 for s in j["slots"] for m in s["members"]) and
  all(sum(m["tokens"] for m in s["members"]) == sum(d["length"] for d in s["documents"])
      for s in j["slots"]) and
  len({(s["wave"], r) for s in j["slots"] for r in s["group"]}) ==
    sum(len(s["group"]) for s in j["slots"])'
json_check "per-rank times and the bound" '
  len(j["ranks"]) == 4 and
  all(abs(r["busy_seconds"] + r["idle_seconds"] - j["step_seconds"]) < 1e-9 * j["step_seconds"]
      for r in j["ranks"]) and
  max(r["busy_seconds"] for r in j["ranks"]) == j["step_seconds"] and
  0 < j["lower_bound_seconds"] <= j["step_seconds"] and
  abs(j["step_over_bound"] - j["step_seconds"] / j["lower_bound_seconds"]) < 1e-12 and
  j["bytes_moved"] == sum(m["bytes_received"] for s in j["slots"] for m in s["members"]) and
  j["bytes_moved"] <= j["allgather_bytes"] and j["plan_time_us"] > 0 and
  all(0 <= m["partial_tiles"] <= m["tiles"] for s in j["slots"] for m in s["members"]) and
  any(m["partial_tiles"] > 0 for s in j["slots"] for m in s["members"])'
pass

expect_ok "schedule cuts a document longer than W x T" schedule --world 2 \
  --max-tokens-per-rank 100 --lengths 450,30 --strategy hybrid --format json
json_check "pieces at multiples of W x T" '
  sorted((d["doc"], d["offset"], d["length"]) for s in j["slots"] for d in s["documents"]) ==
    [(0, 0, 200), (0, 200, 200), (0, 400, 50), (1, 0, 30)]'
pass

expect_ok "schedule --compare" schedule $S4 --lengths 2500,1800,900,700,400 --compare \
  --format json
json_check "every scheduler on the same batch" \
  '[s["requested"] for s in j["schedulers"]] == ["fixed", "megatron_dcp", "hybrid"] and
   len({s["lower_bound_seconds"] for s in j["schedulers"]}) == 1 and
   all(s["step_seconds"] >= s["lower_bound_seconds"] for s in j["schedulers"])'
pass

expect_ok "schedule --compare with a scheduler that cannot serve" schedule --world 4 \
  --max-tokens-per-rank 256 --lengths 4000,100,900 --cp 2 --compare --format json
json_check "fixed refused with its reason, the others served" \
  '"cp 2 rows hold 512 tokens" in j["schedulers"][0]["refused"] and
   all("step_seconds" in s for s in j["schedulers"][1:])'
pass

expect_ok "schedule --compare table" schedule $S4 --lengths 2500,1800,900 --compare
for name in fixed megatron_dcp hybrid; do
  grep -q "^$name " "$OUT" || fail "the comparison has no row for $name"
done
pass

expect_ok "schedule --cp for fixed" schedule --world 8 --max-tokens-per-rank 1000 \
  --lengths 900,800,700 --strategy fixed --cp 2 --format json
json_check "fixed groups of --cp ranks" 'all(len(s["group"]) == 2 for s in j["slots"])'
pass

cat >"$WORK/profile.yaml" <<'YAML'
name: slow_network
tile_seconds: 2.0e-6
token_seconds: 1.0e-8
slot_seconds: 1.0e-4
kv_bytes_per_token: 65536
intra_node_bytes_per_second: 1.0e9
inter_node_bytes_per_second: 1.0e8
latency_seconds: 1.0e-5
ranks_per_node: 2
YAML
expect_ok "schedule --profile FILE" schedule $S4 --lengths 2500,1800 --profile "$WORK/profile.yaml" \
  --format json
json_check "the file's profile is used" 'j["request"]["profile"] == "slow_network"'
pass

# The config's scheduler and profile, as `fulcrum train` reads them: a
# profile file named in a config is found next to that config.
mkdir -p "$WORK/job"
cp "$WORK/profile.yaml" "$WORK/job/slow.yaml"
printf 'balancer:\n  schedule:\n    strategy: megatron_dcp\n    profile: slow.yaml\n' \
  >"$WORK/job/job.yaml"
expect_ok "schedule reads balancer.schedule from --config" schedule $S4 --lengths 2500,1800 \
  --config "$WORK/job/job.yaml" --format json
json_check "the config's scheduler and profile are used" \
  'j["requested"] == "megatron_dcp" and j["request"]["profile"] == "slow_network"'
pass
expect_ok "schedule reads balancer.schedule from --set" schedule $S4 --lengths 2500,1800 \
  --set balancer.schedule.strategy=fixed --set balancer.schedule.profile=h100_7b --format json
json_check "the --set scheduler and profile are used" \
  'j["requested"] == "fixed" and j["request"]["profile"] == "h100_7b"'
pass

expect_ok "schedule with the built-in balancer" schedule $S4 --lengths 2500,1800 --plugin builtin \
  --strategy hybrid --format json
json_check "built-in fixed, and says so" \
  'j["used"] == "fixed" and "built-in balancer has no scheduler" in j["fallback_reason"]'
pass

# Plugins of other ABI versions, from the build tree when it is there.
TEST_PLUGINS=$(cd "$(dirname "$FULCRUM")/../test_plugins" 2>/dev/null && pwd)
if [[ -n "$TEST_PLUGINS" && -f "$TEST_PLUGINS/libfulcrum_compat_v1_0.so" ]]; then
  NOPERM="--set balancer.check_permissions=false"
  expect_ok "schedule with an ABI 1.0 plugin" schedule $S4 --lengths 2500,1800,600 $NOPERM \
    --plugin "$TEST_PLUGINS/libfulcrum_compat_v1_0.so" --format json
  json_check "the host's fixed schedule, said so" \
    'j["used"] == "fixed" and "speaks ABI 1.0, which has no schedule hook" in j["fallback_reason"]'
  pass

  run "broken schedule is refused" schedule $S4 --lengths 2500,1800,900,700,400 $NOPERM \
    --plugin "$TEST_PLUGINS/libfulcrum_broken_schedule_wave_clash.so" --strategy fixed
  [[ $RC -eq 2 ]] || fail "expected exit code 2 for a plugin's invalid schedule (the plugin's fault, named)"
  [[ $(wc -l <"$ERR") -eq 1 ]] || fail "expected one line on stderr"
  grep -q "returned an invalid schedule: .* both hold rank 0 in wave 0" "$ERR" ||
    fail "the refusal does not name the rule"
  pass
else
  echo "cli_test: no test plugins beside $FULCRUM; ABI-version checks skipped" >&2
fi

# ---------------------------------------------------------------- bad input: schedule
C="fulcrum schedule: "
expect_usage "schedule no world" "$C" schedule --max-tokens-per-rank 10 --lengths 5
expect_usage "schedule world 0" "$C" schedule --world 0 --max-tokens-per-rank 10 --lengths 5
expect_usage "schedule world junk" "$C" schedule --world 4x --max-tokens-per-rank 10 --lengths 5
expect_usage "schedule no T" "$C" schedule --world 4 --lengths 5
expect_usage "schedule T 0" "$C" schedule --world 4 --max-tokens-per-rank 0 --lengths 5
expect_usage "schedule W x T too large" "$C" schedule --world 4096 \
  --max-tokens-per-rank 2147483647 --lengths 5
expect_usage "schedule no batch" "$C" schedule $S4
expect_usage "schedule both batches" "$C" schedule $S4 --lengths 5 --lengths-file "$WORK/lengths.json"
expect_usage "schedule zero length" "$C" schedule $S4 --lengths 5,0
expect_usage "schedule missing file" "$C" schedule $S4 --lengths-file "$WORK/missing.json"
expect_usage "schedule unknown scheduler" "$C" schedule $S4 --lengths 5 --strategy best
expect_usage "schedule cp not a divisor" "$C" schedule $S4 --lengths 5 --strategy fixed --cp 3
expect_usage "schedule cp too small for a document" "$C" schedule --world 4 \
  --max-tokens-per-rank 256 --lengths 4000,100,900 --cp 2 --strategy fixed
expect_usage "schedule cp 0" "$C" schedule $S4 --lengths 5 --cp 0
expect_usage "schedule cp with hybrid" "$C" schedule $S4 --lengths 5 --strategy hybrid --cp 2
grep -q "drop --cp or use --strategy fixed" "$ERR" || fail "--cp with hybrid does not say what to do"
expect_usage "schedule unknown scheduler from --set" "$C" schedule $S4 --lengths 5 \
  --set balancer.schedule.strategy=best
grep -q "balancer.schedule.strategy" "$ERR" || fail "the refusal does not name the config key"
expect_usage "schedule block-sparse mask" "$C" schedule $S4 --lengths 5 --mask block-sparse
expect_usage "schedule bad mask" "$C" schedule $S4 --lengths 5 --mask sliding:0
expect_usage "schedule bad format" "$C" schedule $S4 --lengths 5 --format yaml
expect_usage "schedule unknown profile" "$C" schedule $S4 --lengths 5 --profile h200
expect_usage "schedule profile is a directory" "$C" schedule $S4 --lengths 5 --profile "$WORK"
expect_usage "schedule profile is a device" "$C" schedule $S4 --lengths 5 --profile /dev/zero
: >"$WORK/empty_profile.yaml"
expect_usage "schedule empty profile" "$C" schedule $S4 --lengths 5 \
  --profile "$WORK/empty_profile.yaml"
sed 's/tile_seconds/tile_secnds/' "$WORK/profile.yaml" >"$WORK/typo_profile.yaml"
expect_usage "schedule profile typo" "$C" schedule $S4 --lengths 5 \
  --profile "$WORK/typo_profile.yaml"
grep -q "did you mean 'tile_seconds'" "$ERR" || fail "no suggestion for the misspelt field"
sed 's/2.0e-6/.nan/' "$WORK/profile.yaml" >"$WORK/nan_profile.yaml"
expect_usage "schedule profile NaN" "$C" schedule $S4 --lengths 5 --profile "$WORK/nan_profile.yaml"
sed 's/1.0e-8/-1/' "$WORK/profile.yaml" >"$WORK/negative_profile.yaml"
expect_usage "schedule profile negative" "$C" schedule $S4 --lengths 5 \
  --profile "$WORK/negative_profile.yaml"
sed 's/1.0e8/.inf/' "$WORK/profile.yaml" >"$WORK/inf_profile.yaml"
expect_usage "schedule profile inf" "$C" schedule $S4 --lengths 5 --profile "$WORK/inf_profile.yaml"
{ cat "$WORK/profile.yaml"; echo "ranks_per_node: 4"; } >"$WORK/dup_profile.yaml"
expect_usage "schedule profile duplicate key" "$C" schedule $S4 --lengths 5 \
  --profile "$WORK/dup_profile.yaml"
grep -v latency "$WORK/profile.yaml" >"$WORK/short_profile.yaml"
expect_usage "schedule profile missing field" "$C" schedule $S4 --lengths 5 \
  --profile "$WORK/short_profile.yaml"
head -c 70000 /dev/zero | tr '\0' '#' >"$WORK/huge_profile.yaml"
expect_usage "schedule profile huge" "$C" schedule $S4 --lengths 5 --profile "$WORK/huge_profile.yaml"
expect_usage "schedule unknown flag" "$C" schedule $S4 --lengths 5 --waves 3

# ---------------------------------------------------------------- work bounds
# Just past each bound the --help texts state, the command refuses before
# starting, naming its estimate; the help states the bound it enforces.
for command in plan schedule dp-partition; do
  expect_ok "$command help states the work bound" $command --help
  grep -q "refused before it starts" "$OUT" || fail "$command --help does not state its bound"
  pass
done
expect_usage "plan past 2^25 tokens" "fulcrum plan: " plan --cp 8 --strategy auto \
  --seq-len 67108864
grep -q "a row of 67108864 tokens in 1 document (524288 blocks of 128) on 8 ranks would take about" \
  "$ERR" || fail "the refusal does not give the work and the estimate"
expect_usage "plan --compare past 2^22 tokens" "fulcrum plan: " plan --cp 8 --compare \
  --seq-len 8388608
grep -q "one --strategy instead of --compare" "$ERR" || fail "no advice for --compare"
expect_usage "plan past 2^18 ranks" "fulcrum plan: " plan --cp 524288 --strategy auto \
  --seq-len 524288
expect_usage "schedule past 8 x 10^6 tokens" "fulcrum schedule: " schedule --world 64 \
  --max-tokens-per-rank 262144 --lengths 8388608,8388608
expect_usage "schedule with a 2^14 x 2^14 member table" "fulcrum schedule: " schedule \
  --world 16384 --max-tokens-per-rank 4096 --lengths 16384
grep -q "on 16384 ranks would take about .* and 2.4 GB" "$ERR" || fail "the table's bytes not counted"
expect_ok "schedule 8 documents on 8192 ranks" schedule --world 8192 --max-tokens-per-rank 16384 \
  --lengths 4000,3000,5000,2000,8000,1000,6000,3000
pass
python3 -c 'print([1] * 20000)' >"$WORK/many.json"
expect_usage "dp-partition past 2 x 10^8 samples x ranks" "fulcrum dp-partition: " dp-partition \
  --dp 20000 --strategy auto --lengths-file "$WORK/many.json"

# ---------------------------------------------------------------- bad input: top level
expect_usage "no command" "fulcrum: "
expect_usage "unknown command" "fulcrum: " plna --cp 2

echo "$PASSED passed, 0 failed"
