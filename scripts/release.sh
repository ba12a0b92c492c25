#!/usr/bin/env bash
# Builds strata's release artifacts for linux/amd64 and linux/arm64 into
# bin/release/ (RELEASE_DIR):
#
#   strata_VERSION_linux_ARCH.tar.gz   the install tree (usr/, etc/), unpack
#                                      with: tar -C / --strip-components=1 -xzf
#   strata_DEBVERSION_ARCH.deb         the same tree as a Debian package
#   SHA256SUMS
#
# Each carries the binary (cgo; arm64 cross-compiled with Debian's
# gcc-aarch64-linux-gnu), the ONNX Runtime library for its architecture
# (from the onnxruntime-node npm package, checked against pinned hashes), the
# systemd unit, a default config, bash/zsh/fish completions and a man page
# generated from the CLI's help.
#
# The version is `git describe --tags --always --dirty` (VERSION overrides),
# set into the binary with -ldflags -X main.version. ARCHES picks the
# architectures (default "amd64 arm64"). RELEASE_REF=v1.2.3 (or HEAD) builds
# that commit from a temporary clone instead of the work tree, so
# uncommitted changes stay out. Missing Debian tools are installed with
# apt-get.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

GO=${GO:-go}
ARCHES=${ARCHES:-amd64 arm64}
out=${RELEASE_DIR:-$root/bin/release}
cache=$root/.deps/release
if [ -n "${RELEASE_REF:-}" ]; then
	# A shared clone (objects borrowed from this repository) has a .git
	# directory, from which go build stamps the commit into the binary.
	commit=$(git rev-parse --verify "$RELEASE_REF^{commit}")
	wt=$(mktemp -d)
	trap 'rm -rf "$wt"' EXIT
	git clone --quiet --shared --no-checkout "$root" "$wt/src"
	git -C "$wt/src" checkout --quiet --detach "$commit"
	cd "$wt/src"
fi
version=${VERSION:-$(git describe --tags --always --dirty)}

# The onnxruntime-node package ships linux x64 and arm64 builds of the
# library whose C API matches github.com/yalue/onnxruntime_go in go.mod (as
# scripts/install-ort.sh pins for x64).
ORT_NPM_VERSION=1.24.1
declare -A ORT_MEMBER=(
	[amd64]=package/bin/napi-v6/linux/x64/libonnxruntime.so.1
	[arm64]=package/bin/napi-v6/linux/arm64/libonnxruntime.so.1
)
declare -A ORT_SHA256=(
	[amd64]=53ef1ac028dd1b05554b8da28d9159eb3876f99868193d2aaa6e67f0243c23d4
	[arm64]=7954e8bdedb497f830c6a679e818d98399b7f4d81ade1126c3e0be74d28111ab
)
declare -A CC_FOR=([amd64]=gcc [arm64]=aarch64-linux-gnu-gcc)
# The Debian packages each architecture's cgo build needs: the compiler
# and, across architectures, the C library's headers (a Recommends of the
# cross compiler, which --no-install-recommends leaves out).
declare -A DEB_FOR=([amd64]="gcc" [arm64]="gcc-aarch64-linux-gnu libc6-dev-arm64-cross")

die() { echo "release: $*" >&2; exit 1; }
log() { echo "release: $*" >&2; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Debian versions must start with a digit: v1.2.3 -> 1.2.3, v1.2.3-4-gabc ->
# 1.2.3+4.gabc, v1.2.3-rc1 -> 1.2.3~rc1 (sorts before 1.2.3), a bare commit
# abc -> 0.0.0~gitabc; -dirty -> +dirty.
deb_version() {
	local v=${1#v}
	local dirty=
	case "$v" in *-dirty) dirty=+dirty v=${v%-dirty} ;; esac
	if [[ "$v" =~ ^[0-9]+\.[0-9]+ ]]; then
		v=$(echo "$v" | sed -E 's/-([0-9]+)-g([0-9a-f]+)$/+\1.g\2/; s/-/~/g')
	else
		v="0.0.0~git$v"
	fi
	echo "$v$dirty"
}

ensure_tools() {
	local missing=() a
	command -v dpkg-deb >/dev/null || missing+=(dpkg)
	command -v npm >/dev/null || missing+=(npm)
	for a in $ARCHES; do
		[ -n "${CC_FOR[$a]:-}" ] || die "no C cross compiler known for $a (known: amd64 arm64)"
		local p
		for p in ${DEB_FOR[$a]}; do
			if command -v dpkg >/dev/null; then
				dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
			elif [ "$p" = "${DEB_FOR[$a]%% *}" ]; then
				command -v "${CC_FOR[$a]}" >/dev/null || missing+=("$p")
			fi
		done
	done
	[ ${#missing[@]} -eq 0 ] && return
	command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
	local sudo=
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	log "installing ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# fetch_ort puts each architecture's library in $cache/ort/ARCH/, once.
fetch_ort() {
	local need=() a
	for a in $ARCHES; do
		local f=$cache/ort/$a/libonnxruntime.so.1
		[ -f "$f" ] && [ "$(sha_of "$f")" = "${ORT_SHA256[$a]}" ] || need+=("$a")
	done
	[ ${#need[@]} -eq 0 ] && return
	local tmp
	tmp=$(mktemp -d)
	log "fetching onnxruntime-node@$ORT_NPM_VERSION for ${need[*]}"
	(cd "$tmp" && npm pack --silent --ignore-scripts "onnxruntime-node@$ORT_NPM_VERSION" >/dev/null) ||
		die "npm pack onnxruntime-node@$ORT_NPM_VERSION failed (is the npm registry reachable?)"
	for a in "${need[@]}"; do
		tar -xzf "$tmp"/onnxruntime-node-*.tgz -C "$tmp" "${ORT_MEMBER[$a]}"
		local got
		got=$(sha_of "$tmp/${ORT_MEMBER[$a]}")
		[ "$got" = "${ORT_SHA256[$a]}" ] || die "sha256 mismatch for ${ORT_MEMBER[$a]}: got $got, want ${ORT_SHA256[$a]}"
		install -D -m 0644 "$tmp/${ORT_MEMBER[$a]}" "$cache/ort/$a/libonnxruntime.so.1"
	done
	rm -rf "$tmp"
}

build() {
	local a=$1 dst=$2
	log "building linux/$a $version"
	# -buildvcs=true records the commit (`strata version` prints it) even
	# where GOFLAGS turns it off.
	local vcs=()
	git rev-parse --git-dir >/dev/null 2>&1 && vcs=(-buildvcs=true)
	CGO_ENABLED=1 GOOS=linux GOARCH=$a CC=${CC_FOR[$a]} \
		"$GO" build "${vcs[@]}" -trimpath -ldflags "-s -w -X main.version=$version" -o "$dst" ./cmd/strata
}

# stage lays out the install tree for one architecture in $1.
stage() {
	local a=$1 t=$2 docs=$3
	rm -rf "$t"
	install -D -m 0755 "$out/.build/$a/strata" "$t/usr/bin/strata"
	install -D -m 0644 "$cache/ort/$a/libonnxruntime.so.1" "$t/usr/lib/strata/libonnxruntime.so.1"
	install -D -m 0644 packaging/strata.service "$t/usr/lib/systemd/system/strata.service"
	install -D -m 0644 packaging/deb/agent.yaml "$t/etc/strata/agent.yaml"
	install -D -m 0644 packaging/deb/agent.yaml "$t/usr/share/strata/agent.yaml.default"
	install -D -m 0644 packaging/agent.yaml "$t/usr/share/doc/strata/agent.yaml.example"
	install -D -m 0644 README.md "$t/usr/share/doc/strata/README.md"
	[ -f docs/install.md ] && install -D -m 0644 docs/install.md "$t/usr/share/doc/strata/install.md"
	install -D -m 0644 "$docs/completions/strata.bash" "$t/usr/share/bash-completion/completions/strata"
	install -D -m 0644 "$docs/completions/_strata" "$t/usr/share/zsh/vendor-completions/_strata"
	install -D -m 0644 "$docs/completions/strata.fish" "$t/usr/share/fish/vendor_completions.d/strata.fish"
	install -D -m 0644 "$docs/man/strata.1" "$t/usr/share/man/man1/strata.1"
	gzip -9n "$t/usr/share/man/man1/strata.1"
	install -D -m 0755 scripts/install.sh "$t/usr/share/strata/install.sh"
}

deb() {
	local a=$1 t=$2 dv=$3
	local d=$t/DEBIAN
	mkdir -p "$d"
	local size
	size=$(du -sk --exclude=DEBIAN "$t" | cut -f1)
	cat >"$d/control" <<EOF
Package: strata
Version: $dv
Architecture: $a
Maintainer: strata maintainers <maintainers@strata-mesh.invalid>
Installed-Size: $size
Depends: libc6 (>= 2.31), adduser | passwd
Recommends: systemd
Section: net
Priority: optional
Homepage: https://github.com/strata-mesh/strata
Description: mesh of agents that places, serves and monitors models
 strata runs one agent per host (edge, on-prem, cloud); the agents gossip
 into one mesh that places inference and training policies on the hosts
 that fit, serves models with ONNX Runtime and watches them for drift.
 .
 This package carries the agent and CLI, ONNX Runtime, a hardened systemd
 unit (not started until /etc/strata/agent.yaml is configured), shell
 completions and a man page.
EOF
	echo /etc/strata/agent.yaml >"$d/conffiles"
	install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$d/"
	dpkg-deb --root-owner-group -Zxz --build "$t" "$out/strata_${dv}_$a.deb" >/dev/null
	rm -rf "$d"
}

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
ensure_tools
fetch_ort
mkdir -p "$out"
rm -f "$out"/strata_*.deb "$out"/strata_*.tar.gz "$out"/SHA256SUMS
for a in $ARCHES; do
	build "$a" "$out/.build/$a/strata"
done

# Completions and the man page come from the help of a binary this machine
# can run.
host=$("$GO" env GOARCH)
docsbin=$out/.build/$host/strata
[ -x "$docsbin" ] || { docsbin=$out/.build/docs/strata && "$GO" build -o "$docsbin" ./cmd/strata; }
rm -rf "$out/.build/docs-out"
"$GO" run ./packaging/gendocs -bin "$docsbin" -out "$out/.build/docs-out" -version "$version"

dv=$(deb_version "$version")
for a in $ARCHES; do
	name=strata_${version}_linux_$a
	t=$out/.build/$name
	stage "$a" "$t" "$out/.build/docs-out"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$out/.build" -czf "$out/$name.tar.gz" "$name"
	deb "$a" "$t" "$dv"
done
(cd "$out" && sha256sum strata_*.tar.gz strata_*.deb >SHA256SUMS)
log "artifacts in $out:"
(cd "$out" && ls -l strata_*.tar.gz strata_*.deb SHA256SUMS) >&2
