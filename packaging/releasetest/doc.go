// Package releasetest checks the artifacts `make release` builds in
// bin/release: that each .deb carries the binary, ONNX Runtime, the systemd
// unit, the completions and the man page for its architecture, and that the
// linux/arm64 binary runs (under qemu-user on an amd64 host) and joins a mesh
// with an amd64 agent; and runs docs/install.md's three-host guide as written,
// with the .deb, on test bed namespaces that each have their own file system
// (TestInstallGuide, as root).
//
// The tests run when STRATA_RELEASE_TESTS=1 (then missing artifacts fail
// them) or when bin/release holds artifacts; otherwise they skip.
// STRATA_RELEASE_DIR points them at another directory. `make test-release`
// builds the artifacts, installs qemu-user-static and libc6-arm64-cross, and
// runs them.
package releasetest
