#!/usr/bin/env bash
# The whole test suite (what `make test` and CI run), in two pytest processes side
# by side: most of the integration tests' time is their runs' time limits, which
# the other tests can use:
#   - the integration tests and those marked `serial`, one at a time (they share
#     the machine's namespaces, ports and `harness clean`, and their timing matters);
#   - the rest (unit tests, Spark on made-up histories, the report in a browser)
#     and the tests marked `loopback` (the own broker's, and Kafka's late
#     commit: their processes live on 127.0.0.1 alone and share nothing with
#     the clusters)
#     beside them at nice 19, so that they take only the CPU the clusters leave;
#     and, where the machine has cgroup v1's cpu controller, in a cpu cgroup of
#     their own with a small share: nice alone does not hold back a process that
#     starts a session of its own (a broker, Kafka or Spark daemon started with
#     setsid), since the kernel's autogroups give each session an equal share.
# Each half's CPU seconds are counted in a cpuacct cgroup where there is one,
# and said at the end with its wall time.
# The second one's output is shown when both have ended; the exit status is
# pytest's own if one failed (the first one's if both did), else 0. Each lists
# its 40 slowest tests, so a slow suite says where its time went.
# Usage: scripts/test-suite.sh [PYTHON]   (default: .venv/bin/python)
set -uo pipefail
cd "$(dirname "$0")/.."
py=${1:-.venv/bin/python}
beside_log=$(mktemp -t harness-tests-beside.XXXXXX)
# The share of the half beside, against a nice-0 session's 1024: about an
# eighth of a core's time where the clusters want it all, enough for its own
# brokers' ZooKeeper sessions of 2 to 3 s to live.
BESIDE_SHARES=128
groups=()

group() {  # group NAME HIERARCHY HALF: NAME set to a new cgroup's path, or empty where none can be made
    local dir=/sys/fs/cgroup/$2/harness-tests.$$.$3
    printf -v "$1" '%s' ""
    if [ -w "/sys/fs/cgroup/$2" ] && mkdir "$dir" 2>/dev/null; then
        groups+=("$dir")
        printf -v "$1" '%s' "$dir"
    fi
}

in_groups() {  # in_groups "DIR..." COMMAND...: run COMMAND in these cgroups
    local dir
    for dir in $1; do echo "$BASHPID" >"$dir/tasks"; done
    shift
    exec "$@"
}

cpu_seconds() {  # cpu_seconds DIR: the CPU seconds its processes took, or "?"
    if [ -n "$1" ] && [ -r "$1/cpuacct.usage" ]; then awk '{printf "%.0f", $1 / 1e9}' "$1/cpuacct.usage"; else echo "?"; fi
}

cleanup() {
    rm -f "$beside_log"
    local dir
    for dir in "${groups[@]}"; do rmdir "$dir" 2>/dev/null; done
}
trap cleanup EXIT

# The groups of a run of this script that was killed outright (its pid gone), empty now.
for dir in /sys/fs/cgroup/{cpu,cpuacct}/harness-tests.*.*; do
    pid=${dir##*/harness-tests.}
    pid=${pid%%.*}
    if [ -d "$dir" ] && ! kill -0 "$pid" 2>/dev/null; then rmdir "$dir" 2>/dev/null; fi
done
group serial_acct cpuacct serial
group beside_acct cpuacct beside
group beside_cpu cpu beside
if [ -n "$beside_cpu" ]; then echo "$BESIDE_SHARES" >"$beside_cpu/cpu.shares"; fi
started=$SECONDS

# The cache plugin off in the second one: two sessions must not write .pytest_cache at once.
(in_groups "$beside_acct $beside_cpu" nice -n 19 "$py" -m pytest -q -m "(not integration and not serial) or loopback" \
    --durations=40 -p no:cacheprovider) >"$beside_log" 2>&1 &
beside=$!
# (a background job of a script ignores SIGINT: it is told with SIGTERM)
trap 'kill -TERM "$beside" 2>/dev/null' INT TERM

echo "== integration tests and those marked serial, one at a time (the others run beside them, niced)"
(in_groups "$serial_acct" "$py" -m pytest -q -m "(integration or serial) and not loopback" --durations=40)
serial_status=$?
serial_wall=$((SECONDS - started))
wait "$beside"
beside_status=$?
beside_wall=$((SECONDS - started))

echo
echo "== the tests that ran beside them (not integration, not serial, or loopback; nice 19$(
    [ -n "$beside_cpu" ] && echo ", cpu.shares $BESIDE_SHARES"))"
cat "$beside_log"
echo
echo "== the halves: serial ${serial_wall} s, CPU $(cpu_seconds "$serial_acct") s;" \
     "beside ${beside_wall} s, CPU $(cpu_seconds "$beside_acct") s"
if [ "$serial_status" -ne 0 ]; then exit "$serial_status"; fi
exit "$beside_status"
