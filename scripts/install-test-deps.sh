#!/bin/sh
# The system programs the project's tests need, installed from Debian's packages when missing:
#   initdb, pg_ctl, postgres  (package postgresql)    the queue libraries' tests start their own server
#   chromium                  (package chromium)      the HTML report is opened in a real browser
#   node                      (package nodejs)        adapters and ledgers written in JavaScript
#   npm                       (package npm)           the npm packages of the JavaScript library adapters
#   redis-server              (package redis-server)  a shared hypothesis example store, started by a test
#   ip                        (package iproute2)      network namespaces
#   faketime, libfaketime     (packages faketime, libfaketime)  clock faults (chaos/safety/clockfaults.py)
#   ruby + the sidekiq gem    (package ruby-sidekiq)  the Sidekiq adapter (fixtures/libraries/sidekiq, in Ruby)
# and then the npm packages of the adapters written in JavaScript for real libraries
# (fixtures/libraries/bullmq, fixtures/libraries/pgboss, fixtures/libraries/graphile: `npm ci` from each package-lock.json, when its
# node_modules is missing).
# Only what is missing is installed (apt-get as root, or through sudo), so a second run does
# nothing.  The tests fail, never skip, when one of these is missing.
#
#   sh scripts/install-test-deps.sh            install what is missing
#   sh scripts/install-test-deps.sh --dry-run  print what is missing and the command that would install it
set -u

dry=0
case "${1:-}" in
  "") ;;
  -n|--dry-run) dry=1 ;;
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-test-deps: unknown option $1 (use --dry-run or --help)" >&2; exit 2 ;;
esac

have() { command -v "$1" >/dev/null 2>&1; }

have_postgres() {
  if [ -n "${LEDGERCHECK_PG_BIN:-}" ] && [ -x "$LEDGERCHECK_PG_BIN/initdb" ]; then return 0; fi
  if have initdb && have pg_ctl && have postgres; then return 0; fi
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then return 0; fi
  done
  return 1
}

have_chromium() {
  if [ -n "${LEDGERCHECK_CHROMIUM:-}" ] && [ -x "$LEDGERCHECK_CHROMIUM" ]; then return 0; fi
  have chromium || have chromium-browser || have google-chrome || have google-chrome-stable
}

need=""
have_postgres || need="$need postgresql"
have_chromium || need="$need chromium"
have node || need="$need nodejs"
have npm || need="$need npm"
have redis-server || need="$need redis-server"
have ip || need="$need iproute2"
have faketime || need="$need faketime libfaketime"
{ have ruby && ruby -e 'require "sidekiq"' >/dev/null 2>&1; } || need="$need ruby-sidekiq"
need="${need# }"

# The npm packages of fixtures/libraries/<library>/package.json (pinned in its package-lock.json).
npm_deps() {
  here="$(cd "$(dirname "$0")/.." && pwd)"
  for pkg in "$here"/fixtures/libraries/*/package-lock.json; do
    [ -f "$pkg" ] || continue
    dir="$(dirname "$pkg")"
    [ -d "$dir/node_modules" ] && continue
    if [ "$dry" -eq 1 ]; then
      echo "install-test-deps: would run: npm ci --prefix $dir"
      continue
    fi
    if ! have npm; then
      echo "install-test-deps: cannot install the npm packages of $dir: no npm (package npm)" >&2
      return 1
    fi
    echo "install-test-deps: npm ci --prefix $dir"
    if ! npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null; then
      echo "install-test-deps: npm ci in $dir failed (see the messages above)" >&2
      return 1
    fi
  done
}

if [ -z "$need" ]; then
  echo "install-test-deps: nothing to install (postgresql, chromium, nodejs, npm, redis-server, iproute2, faketime, ruby-sidekiq present)"
  npm_deps || exit 1
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif have sudo; then
  sudo="sudo -n"  # never waits for a password: fails at once instead
else
  sudo="none"
fi

if [ "$dry" -eq 1 ]; then
  echo "install-test-deps: missing: $need"
  if [ "$sudo" = none ] || ! have apt-get; then
    echo "install-test-deps: would fail: installing needs apt-get and root or sudo"
  else
    echo "install-test-deps: would run: ${sudo:+$sudo }apt-get update && ${sudo:+$sudo }apt-get install -y $need"
  fi
  npm_deps
  exit 0
fi

if ! have apt-get; then
  echo "install-test-deps: cannot install $need: no apt-get on this machine; install them by hand" >&2
  exit 1
fi
if [ "$sudo" = none ]; then
  echo "install-test-deps: cannot install $need: not root and no sudo; run this script as root" >&2
  exit 1
fi

echo "install-test-deps: installing $need"
# shellcheck disable=SC2086 # $need is a list of package names
if ! { $sudo apt-get update -qq >/dev/null &&
       DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null; }; then
  echo "install-test-deps: apt-get could not install $need (see the messages above)" >&2
  exit 1
fi
npm_deps || exit 1
