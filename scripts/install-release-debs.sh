#!/usr/bin/env bash
# Installs the Debian packages the release tests use, when missing:
#
#   qemu-user-static   runs the linux/arm64 binary on an amd64 host
#   libc6-arm64-cross  the arm64 C library and loader (/usr/aarch64-linux-gnu)
#                      the dynamically linked arm64 binary needs under qemu
#   dpkg               dpkg-deb, to read the .debs
#   curl               docs/install.md's guide asks the shop's agent with it
#
# On a machine without apt-get the tests that need these skip and say why.
set -euo pipefail
pkgs=(qemu-user-static libc6-arm64-cross dpkg curl)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-release-debs: apt-get not found; release tests needing ${missing[*]} will skip" >&2
	exit 0
fi
SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
