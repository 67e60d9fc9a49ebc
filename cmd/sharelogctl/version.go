package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3" ./cmd/sharelogctl.
// Otherwise it comes from the module version in the build info, or "dev".
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// vcsRevision returns the commit the binary was built from, if the build recorded it.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified {
		rev += "-dirty"
	}
	return rev
}

func (a *app) versionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the version of sharelogctl",
		Example: `  sharelogctl version`,
		Args:    cobra.NoArgs,
	}
	cmd.RunE = a.runE(func(*cobra.Command, []string) error {
		v := struct {
			Version   string `json:"version"`
			Commit    string `json:"commit,omitempty"`
			GoVersion string `json:"goVersion"`
			Platform  string `json:"platform"`
		}{versionString(), vcsRevision(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
		if a.jsonOutput() {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", b)
			return err
		}
		line := "sharelogctl " + v.Version
		if v.Commit != "" {
			line += " (commit " + v.Commit + ")"
		}
		_, err := fmt.Fprintf(a.stdout, "%s %s %s\n", line, v.GoVersion, v.Platform)
		return err
	})
	return cmd
}
