#!/usr/bin/env bash
# The README's main command, run exactly as written in a fresh clone of this
# checkout's HEAD (what a new user gets): it must build what the main job needs
# and finish the job with its summary. Exits 77 (skipped) when the source is
# not a git checkout.
#   readme_main_command.sh SOURCE_DIR
set -euo pipefail
src=$1
if ! git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "skipped: $src is not a git checkout with a commit to clone"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/fulcrum"
cd "$work/fulcrum"

# The first line of the README's first ```sh block is the main command.
command=$(awk '/^```sh$/ { getline; print; exit }' README.md)
case $command in
  *"cmake --build --preset main"*"fulcrum train --config "*) ;;
  *) echo "FAIL: the README's first command is not the main command: $command"; exit 1 ;;
esac
echo "running: $command"

# Where the caller builds with ccache, the clone shares its cache: paths
# inside the clone are hashed relative to it, as .ci/run does for its checkout.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
start=$SECONDS
if ! bash -c "$command" >main.log 2>&1; then
  echo "FAIL: the main command exited non-zero; its last lines:"
  tail -n 40 main.log
  exit 1
fi
echo "the main command took $((SECONDS - start)) s"

fail=0
# It built the main job's programs and nothing else of the test suite.
for program in build/release/bin/fulcrum build/release/bin/fulcrum-worker; do
  [[ -x $program ]] || { echo "FAIL: $program was not built"; fail=1; }
done
if compgen -G 'build/release/bin/*_tests' >/dev/null; then
  echo "FAIL: the main command built test binaries: $(ls build/release/bin/*_tests | head -3)"
  fail=1
fi
# The job ran to its end: the summary, and a loss for its last step.
grep -q "fulcrum train: .* steps in .* s" main.log || {
  echo "FAIL: no end-of-run summary in the output"
  fail=1
}
# It learned: the quickstart trains on real text, so its loss falls by at least
# one nat from the first step to the last ("loss A at step 1 -> B at step N").
losses=$(sed -n 's/.*loss  *\([0-9.]*\) at step 1 -> \([0-9.]*\) at step [0-9]*.*/\1 \2/p' main.log)
if [[ -z $losses ]]; then
  echo "FAIL: no loss line in the summary"
  fail=1
elif ! awk -v l="$losses" 'BEGIN { split(l, x, " "); exit !(x[1] - x[2] >= 1) }'; then
  echo "FAIL: the loss fell from $losses, less than 1 nat"
  fail=1
fi
# Real text: no note that the tokens are random.
if grep -q "uniform random" main.log; then
  echo "FAIL: the summary says the quickstart's tokens are random"
  fail=1
fi
tail -n 12 main.log
exit $fail
