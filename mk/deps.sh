#!/usr/bin/env bash
# Install the Debian packages named on the command line that are missing.
# Prints what it installs; does nothing when everything is present.
set -euo pipefail

missing=()
for p in "$@"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#} Debian packages present"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "deps: missing packages: ${missing[*]}" >&2
        echo "deps: not root and no sudo; install them as root" >&2
        exit 1
    fi
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Package lists may be absent or stale on a fresh machine: update once.
$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
$sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: installed ${#missing[@]} package(s)"
