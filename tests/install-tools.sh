#!/usr/bin/env bash
# tests/install-tools.sh: installs the programs the test suite drives beside cargo's own
# crates, so that `cargo test --release` passes on a fresh machine.
#
#   nginx            the shipped proxy configuration, in front of two replicas (scale_out)
#   systemd-analyze  checks of the shipped systemd unit (deploy)
#   openssl          a test certificate authority for HTTPS (http)
#   unshare          an offline run of a bundle, with no network (bundle)
#   python3          a fake upstream MCP server and a fake E2B sandbox (upstreams, e2b_fake)
#   python3 -m pip   downloads the pinned real wheels the notebook tests serve
#                    (tests/fetch-notebook-wheels.sh; real_wheels, notebook, notebook_http)
#   pgrep, kill      checks that child processes are gone (packages, sandboxes, cli)
#
# What is already there is left alone. What is missing is installed with apt-get (Debian
# and Ubuntu), as root or through `sudo -n`. Where that cannot be done (not root and no
# password-less sudo, or no apt-get), it names each missing program and its package and
# exits with status 1: the suite fails without them, it never skips them.
set -euo pipefail

# program, then the Debian package that ships it
wanted=(
  "nginx nginx"
  "systemd-analyze systemd"
  "openssl openssl"
  "unshare util-linux"
  "python3 python3"
  "pip python3-pip"
  "pgrep procps"
  "kill procps"
)

have() {
  if [ "$1" = pip ]; then
    # pip as the fetch script runs it: a module of the machine's python3
    python3 -m pip --version >/dev/null 2>&1
    return
  fi
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]
}

missing_programs=()
missing_packages=()
for pair in "${wanted[@]}"; do
  read -r program package <<<"$pair"
  if ! have "$program"; then
    missing_programs+=("$program")
    case " ${missing_packages[*]-} " in
      *" $package "*) ;;
      *) missing_packages+=("$package") ;;
    esac
  fi
done

if [ "${#missing_programs[@]}" -eq 0 ]; then
  echo "install-tools: every program the tests need is installed"
  exit 0
fi

echo "install-tools: missing ${missing_programs[*]} (Debian packages: ${missing_packages[*]})"

refuse() {
  echo "install-tools: $1" >&2
  echo "install-tools: install them yourself (Debian/Ubuntu: apt-get install -y ${missing_packages[*]}), then run the tests again" >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || refuse "this machine has no apt-get"
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  refuse "installing needs root (or sudo without a password), and this user has neither"
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing_packages[@]}" >/dev/null

still=()
for program in "${missing_programs[@]}"; do
  have "$program" || still+=("$program")
done
[ "${#still[@]}" -eq 0 ] || refuse "apt-get finished, but ${still[*]} is still not found"
echo "install-tools: installed ${missing_packages[*]}"
