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
#     beside them at nice 19, so that they take only the CPU the clusters leave.
# The second one's output is shown when both have ended; the exit status is
# pytest's own if one failed (the first one's if both did), else 0. Each lists
# its 40 slowest tests, so a slow suite says where its time went.
# Usage: scripts/test-suite.sh [PYTHON]   (default: .venv/bin/python)
set -uo pipefail
cd "$(dirname "$0")/.."
py=${1:-.venv/bin/python}
beside_log=$(mktemp -t harness-tests-beside.XXXXXX)
trap 'rm -f "$beside_log"' EXIT

# The cache plugin off in the second one: two sessions must not write .pytest_cache at once.
nice -n 19 "$py" -m pytest -q -m "(not integration and not serial) or loopback" --durations=40 -p no:cacheprovider \
    >"$beside_log" 2>&1 &
beside=$!
# (a background job of a script ignores SIGINT: it is told with SIGTERM)
trap 'kill -TERM "$beside" 2>/dev/null' INT TERM

echo "== integration tests and those marked serial, one at a time (the others run beside them, niced)"
"$py" -m pytest -q -m "(integration or serial) and not loopback" --durations=40
serial_status=$?
wait "$beside"
beside_status=$?

echo
echo "== the tests that ran beside them (not integration, not serial, or loopback; nice 19)"
cat "$beside_log"
if [ "$serial_status" -ne 0 ]; then exit "$serial_status"; fi
exit "$beside_status"
