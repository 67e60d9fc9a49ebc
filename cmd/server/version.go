package main

import (
	"errors"
	"runtime/debug"
	"strings"
)

// version is the server's version. Release builds set it with
// -ldflags "-X main.version=v1.2.3" (make build does, from git describe);
// otherwise it comes from the build information Go records: the module
// version for go install of a tagged module, else the VCS revision.
var version = ""

// progName is how usage and errors name the program: the name it was
// invoked by (make build names the binary sharelog-server, go build names
// it server).
var progName = "sharelog-server"

// errShowVersion is returned by parseFlags for --version.
var errShowVersion = errors.New("show version")

// versionString is version, or what the build information says.
func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		return "devel-" + rev[:min(len(rev), 12)] + modified
	}
	if v == "" {
		return "(devel)"
	}
	return strings.TrimSpace(v)
}
