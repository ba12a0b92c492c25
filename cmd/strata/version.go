package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version, when set at build time (-ldflags "-X main.version=v1.2.3"),
// wins over the module version the build recorded; commit and modified
// (-X main.commit=SHA -X main.modified=true) stand in for the VCS data a
// build with -buildvcs=false does not record (make build sets all three).
var (
	version  = ""
	commit   = ""
	modified = ""
)

// buildVersion is what `strata version` prints.
type buildVersion struct {
	// Version is the module version: a tag (v1.2.3), a pseudo-version,
	// or "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Commit is the VCS revision built from, "" when the build did not
	// record one (go build -buildvcs=false, or no VCS).
	Commit string `json:"commit,omitempty"`
	// CommitTime is the revision's commit time (RFC 3339), when recorded.
	CommitTime string `json:"commit_time,omitempty"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified"`
	// Go is the Go version the binary was built with.
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// readVersion reads the version from the build information the Go
// toolchain embeds in the binary.
func readVersion() buildVersion {
	v := buildVersion{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		v.Go = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.Version = version
	}
	if v.Commit == "" && commit != "" {
		v.Commit, v.Modified = commit, modified == "true"
	}
	return v
}

// Short is the version as members show it: "v1.2.3 (abc1234)", the
// commit cut to 7 characters and marked "+" when modified.
func (v buildVersion) Short() string {
	if v.Commit == "" {
		return v.Version
	}
	c := v.Commit[:min(7, len(v.Commit))]
	if v.Modified {
		c += "+"
	}
	return v.Version + " (" + c + ")"
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "[-o json|yaml]", stderr)
	output := fs.String("o", "text", "output `format`: text, json or yaml")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	v := readVersion()
	switch *output {
	case outJSON, outYAML:
		return (&clientFlags{output: *output}).emitValue(stdout, v)
	case "text", "table":
		commit := v.Commit
		switch {
		case commit == "":
			commit = "unknown (built without VCS information)"
		case v.Modified:
			commit += " (modified)"
		}
		_, err := fmt.Fprintf(stdout, "strata %s\ncommit: %s\ngo:     %s %s\n", v.Version, commit, v.Go, v.Platform)
		return err
	}
	return fmt.Errorf("-o %q: use text, json or yaml", *output)
}
