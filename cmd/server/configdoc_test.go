package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/app"
)

var updateConfigDoc = flag.Bool("update-config-doc", false, "rewrite the flag table of docs/configuration.md")

const (
	configDocPath  = "../../docs/configuration.md"
	configDocBegin = "<!-- flags:begin: generated from the server's flag set by `go test ./cmd/server -run TestConfigurationDoc -update-config-doc`; do not edit by hand -->"
	configDocEnd   = "<!-- flags:end -->"
)

// configSections groups the flags of docs/configuration.md by the first
// matching name prefix; the rest go under "Other".
var configSections = []struct{ title, prefixes string }{
	{"Storage and durability", "data-dir segment-bytes fsync compaction- max-open-segments max-partitions"},
	{"Listeners and TLS", "grpc- http- tls- max-request-bytes shutdown-timeout log-"},
	{"Authentication and authorization", "auth- authorizer super-users trusted-proxies insecure-allow-remote"},
	{"Limits and budgets", "max-connections max-long-polls max-response- max-fetch-bytes health-probes- max-share-sessions max-change-streams"},
	{"Kafka listener", "kafka- group- offsets- transaction- transactional-"},
	{"DCP listener", "dcp-"},
	{"Share groups and dead letters", "share- dlq-"},
	{"Change streams", "oso-"},
	{"Cluster mode", "store nats- instance-id advertise-addr cluster-mode lease-ttl"},
	{"Repair", "repair-"},
}

func configSection(name string) string {
	for _, s := range configSections {
		for p := range strings.FieldsSeq(s.prefixes) {
			if name == p || (strings.HasSuffix(p, "-") && strings.HasPrefix(name, p)) || strings.HasPrefix(name, p+"-") {
				return s.title
			}
		}
	}
	return "Other"
}

// configTable renders every server flag with its environment variable,
// default and --help text, grouped by section.
func configTable() string {
	cfg := app.DefaultConfig()
	var lc logConfig
	fs, _ := newFlagSet(&cfg, &lc, io.Discard)
	rows := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return
		}
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" || f.DefValue == "[]" {
			def = "unset"
		}
		usage := strings.ReplaceAll(f.Usage, "|", `\|`)
		env := "SHARELOG_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		sec := configSection(f.Name)
		rows[sec] = append(rows[sec], fmt.Sprintf("| `--%s` | `%s` | %s | %s |", f.Name, env, def, usage))
	})
	var b strings.Builder
	b.WriteString(configDocBegin + "\n")
	titles := []string{}
	for _, s := range configSections {
		titles = append(titles, s.title)
	}
	for _, title := range append(titles, "Other") {
		if len(rows[title]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n| flag | environment variable | default | meaning |\n| --- | --- | --- | --- |\n", title)
		for _, r := range rows[title] {
			b.WriteString(r + "\n")
		}
	}
	b.WriteString("\n" + configDocEnd)
	return b.String()
}

// docs/configuration.md lists every flag of the server, with its
// environment variable, default and meaning, as --help has them: a flag
// added without the page fails here (run with -update-config-doc to
// regenerate the table).
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile(configDocPath)
	require.NoError(t, err)
	s := string(doc)
	i, j := strings.Index(s, configDocBegin), strings.Index(s, configDocEnd)
	require.True(t, i >= 0 && j > i, "docs/configuration.md has the generated flag table's markers")
	want := s[:i] + configTable() + s[j+len(configDocEnd):]
	if *updateConfigDoc {
		require.NoError(t, os.WriteFile(configDocPath, []byte(want), 0o644))
		return
	}
	if want != s {
		have := map[string]bool{}
		for l := range strings.SplitSeq(s, "\n") {
			have[l] = true
		}
		var missing []string
		for l := range strings.SplitSeq(want, "\n") {
			if !have[l] {
				missing = append(missing, l)
			}
		}
		t.Fatalf("docs/configuration.md is not current (go test ./cmd/server -run TestConfigurationDoc -update-config-doc); lines it lacks or has otherwise:\n%s",
			strings.Join(missing, "\n"))
	}
}
