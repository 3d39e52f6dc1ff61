#!/usr/bin/env bash
# Run the project's test command on a busy machine: N times in a row with a CPU hog on every
# core, then once pinned to one core.  No test's verdict may depend on how fast the machine is
# (docs/ci.md, "A busy machine"); this is the proof anyone can repeat.
#
#   scripts/stress-run.sh                      3 hogged runs + 1 pinned run of `pytest -n 2`
#   scripts/stress-run.sh --runs 1 --no-pinned one hogged run
#   scripts/stress-run.sh -- tests/fixtures    pytest -n 2 tests/fixtures (anything after -- goes to pytest)
#
# Options: --runs N (hogged runs, default 3), --hogs N (hog processes, default: one per core),
# --no-pinned (skip the pinned run), --pinned-only, --pin CPU (the core of the pinned run,
# default 0), --log-dir DIR (each run's output; default a new directory under $TMPDIR or /tmp).
# The hogs are `stress-ng --cpu N` when stress-ng is installed (Debian: apt-get install stress-ng),
# else N busy Python loops; the script starts them before each hogged run and stops them (by
# their process ids) after it, and on exit.  The pinned run has no hog: `taskset -c CPU` makes the
# whole run (both xdist workers and everything they start) share that one core.
# Each run prints one line: its number, kind, exit status, pytest's summary line and its wall
# time.  The script exits 0 when every run passed, else 1 (2 on bad usage).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3
hogs=$(nproc 2>/dev/null || echo 2)
pinned=1
hogged=1
pin=0
log_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="${2:-}"; shift 2 ;;
    --hogs) hogs="${2:-}"; shift 2 ;;
    --no-pinned) pinned=0; shift ;;
    --pinned-only) hogged=0; shift ;;
    --pin) pin="${2:-}"; shift 2 ;;
    --log-dir) log_dir="${2:-}"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stress-run: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$runs$hogs$pin" in *[!0-9]*|"") echo "stress-run: --runs, --hogs and --pin take whole numbers" >&2; exit 2 ;; esac
command -v pytest >/dev/null || { echo "stress-run: pytest not found: activate the venv and pip install -e '.[test]'" >&2; exit 2; }
if [ "$pinned" = 1 ] && ! command -v taskset >/dev/null; then
  echo "stress-run: taskset not found (util-linux); use --no-pinned" >&2; exit 2
fi
[ -n "$log_dir" ] || log_dir=$(mktemp -d "${TMPDIR:-/tmp}/stress-run-XXXXXX")
mkdir -p "$log_dir" || exit 2

hog_pids=()
start_hogs() {
  if command -v stress-ng >/dev/null; then
    stress-ng --cpu "$hogs" --quiet >/dev/null 2>&1 &
    hog_pids+=("$!")
    what="stress-ng --cpu $hogs"
  else
    for _ in $(seq "$hogs"); do
      python3 -c 'while True: pass' &
      hog_pids+=("$!")
    done
    what="$hogs busy Python loops"
  fi
}
stop_hogs() {
  for p in "${hog_pids[@]}"; do
    kill "$p" 2>/dev/null
  done
  for p in "${hog_pids[@]}"; do
    wait "$p" 2>/dev/null
  done
  hog_pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT TERM

failed=0
one_run() {  # one_run N KIND COMMAND...
  local n="$1" kind="$2"; shift 2
  local log="$log_dir/run-$n-$kind.log" start end rc summary
  start=$(date +%s)
  "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 | sed 's/^=* *//; s/ *=*$//')
  printf 'run %s (%s): exit %s, %s, %dm%02ds wall  [%s]\n' "$n" "$kind" "$rc" "${summary:-no summary}" \
    $(((end - start) / 60)) $(((end - start) % 60)) "$log"
  [ "$rc" -eq 0 ] || failed=1
}

echo "stress-run: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); logs in $log_dir"
n=0
if [ "$hogged" = 1 ]; then
  for _ in $(seq "$runs"); do
    n=$((n + 1))
    start_hogs
    echo "run $n: pytest -n 2 $* beside $what"
    one_run "$n" hogged pytest -n 2 "$@"
    stop_hogs
  done
fi
if [ "$pinned" = 1 ]; then
  n=$((n + 1))
  echo "run $n: taskset -c $pin pytest -n 2 $* (the whole run on core $pin)"
  one_run "$n" pinned taskset -c "$pin" pytest -n 2 "$@"
fi
[ "$failed" -eq 0 ] && echo "stress-run: every run passed" || echo "stress-run: a run failed (see its log)"
exit "$failed"
