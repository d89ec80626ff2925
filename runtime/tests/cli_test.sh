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
grep -q 'plan' "$OUT" && grep -q 'dp-partition' "$OUT" || fail "help does not list the commands"
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

# ---------------------------------------------------------------- plan: known answers
expect_ok "head_tail known answer" plan --cp 2 --strategy head_tail --seq-len 8 --positions \
  --format json
json_check "rank 0 positions are [0,7,1,6]" 'j["ranks"][0]["positions"] == [0, 7, 1, 6]'
json_check "rank 1 positions are [2,5,3,4]" 'j["ranks"][1]["positions"] == [2, 5, 3, 4]'
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

expect_ok "missing plugin falls back loudly" plan --plugin "$WORK/no_such_plugin.so" --cp 2 \
  --strategy contiguous --seq-len 8 --format json
grep -q 'warning' "$ERR" || fail "no warning about the missing plugin"
json_check "still planned" 'j["used"] == "contiguous"'
pass

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

# ---------------------------------------------------------------- bad input: top level
expect_usage "no command" "fulcrum: "
expect_usage "unknown command" "fulcrum: " plna --cp 2

echo "$PASSED passed, 0 failed"
