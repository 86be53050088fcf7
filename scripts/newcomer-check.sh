#!/usr/bin/env bash
# What a newcomer does, before an issue is resolved: clone this repository's HEAD into DIR with the
# shared folder beside it, then run the README's two commands there in a bare environment (env -i):
# the test command (.ci/run, i.e. scripts/test.sh) and the main job (scripts/run.sh).
#   scripts/newcomer-check.sh DIR [tests|main|both]     (default: both, tests first)
# Logs: DIR/tests.log, DIR/main.log; the exit status of each and `git status --short` afterwards are
# printed and appended to DIR/check.txt. Exit status: 0 only when every command run exited 0 and left
# no tracked file changed.
set -uo pipefail
case "${1:-}" in -h|--help|"") sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
dir="$(realpath -m "$1")"; what="${2:-both}"
case "$what" in tests|main|both) ;; *) echo "newcomer-check.sh: unknown step '$what' (tests, main or both)" >&2; exit 2 ;; esac
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(realpath "$repo/../shared")" || { echo "newcomer-check.sh: no shared folder beside $repo" >&2; exit 2; }
mkdir -p "$dir/home"
if [ ! -d "$dir/raptor-tkg" ]; then
  git clone -q "$repo" "$dir/raptor-tkg" || exit 1
fi
ln -sfn "$shared" "$dir/shared"
commit="$(git -C "$dir/raptor-tkg" rev-parse --short=12 HEAD)"
status=0
step() {  # name, command (run in the clone)
  local start rc
  start=$(date +%s)
  env -i HOME="$dir/home" PATH=/usr/local/bin:/usr/bin:/bin bash -c "cd '$dir/raptor-tkg' && $2" > "$dir/$1.log" 2>&1
  rc=$?
  local line="$(date -u +%FT%TZ) $commit $1: exit $rc after $(( $(date +%s) - start )) s; git status: $(git -C "$dir/raptor-tkg" status --short | tr '\n' ' ')"
  echo "$line" | tee -a "$dir/check.txt"
  [ "$rc" -eq 0 ] || status=1
  git -C "$dir/raptor-tkg" status --short --untracked-files=no | grep -q . && status=1
}
[ "$what" = main ] || step tests .ci/run
[ "$what" = tests ] || step main scripts/run.sh
exit $status
