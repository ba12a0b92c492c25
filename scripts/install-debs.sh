#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing.
set -euo pipefail
pkgs=()
# (filled in as tests need packages)
[ ${#pkgs[@]} -eq 0 ] && exit 0
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
