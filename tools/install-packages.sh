#!/usr/bin/env bash
# Installs the Debian packages given that are missing: with apt-get as root,
# with sudo where it needs no password, otherwise prints the command to run
# and exits 1.  Used by run.sh (the project's packages) and
# bench/compare-mpi.sh (the MPI baselines).
#   tools/install-packages.sh WHO PACKAGE...    (WHO prefixes the messages)
set -euo pipefail
who=$1
shift
missing=()
for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
((${#missing[@]})) || exit 0
install=(apt-get install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -eq 0 ]; then
    echo "$who: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    "${install[@]}"
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    echo "$who: installing ${missing[*]} with sudo"
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive "${install[@]}"
else
    echo "$who: missing packages: ${missing[*]}" >&2
    echo "$who: install them with:  sudo apt-get update && sudo ${install[*]}" >&2
    exit 1
fi
