# Shared by the calibrate CLI tests (sourced): run the CLI into $WORK/out and
# $WORK/err, count passes, stop at the first failure with the check's name,
# exit code and stderr. The sourcing script sets FULCRUM, WORK and PASSED.

fail() {
  echo "FAIL: $CHECK: $*" >&2
  echo "  exit code: $RC; stderr:" >&2
  tail -20 "$WORK/err" | sed 's/^/    /' >&2
  echo "$PASSED passed, 1 failed"
  exit 1
}

run() {
  CHECK=$1
  shift
  "$FULCRUM" "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
}

# expect_refusal NAME PATTERN ARGS...: exit 2, one stderr line matching PATTERN.
expect_refusal() {
  local name=$1 pattern=$2
  shift 2
  run "$name" "$@"
  [[ $RC -eq 2 ]] || fail "expected exit 2"
  [[ $(wc -l <"$WORK/err") -eq 1 ]] || fail "expected exactly one line on stderr"
  grep -q -- "$pattern" "$WORK/err" || fail "stderr does not say '$pattern'"
  PASSED=$((PASSED + 1))
}
