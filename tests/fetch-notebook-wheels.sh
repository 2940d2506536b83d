#!/bin/sh
# Downloads the real pure-Python wheels the notebook tests and the door bench serve
# (tests/fixtures/notebook-wheels.txt: pinned, each checked by its sha256) into DIR,
# with the machine's own pip (its index and proxy settings). Usage:
#   tests/fetch-notebook-wheels.sh [DIR]   (default: target/tmp/notebook-wheels)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-"$here/../target/tmp/notebook-wheels"}
mkdir -p "$dir"
exec python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: --implementation py --abi none --platform any --python-version 3.15 \
    -d "$dir" -r "$here/fixtures/notebook-wheels.txt"
