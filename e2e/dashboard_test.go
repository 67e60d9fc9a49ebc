package e2e

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const dashboardPath = "../deploy/grafana/sharelog.json"

// eventOnly are counters that have no series until their first event (a
// failed storage operation, a refused connection), which the workload
// cannot cause; they are checked against their declaration instead.
var eventOnly = map[string]string{
	"sharelog_storage_errors_total":      "../internal/app/metrics.go",
	"sharelog_connections_refused_total": "../internal/app/metrics.go",
}

// clusterOnly are the cluster mode's series (docs/cluster.md "Metrics"),
// which a single-node server does not export: each is checked in a scrape
// of a cluster by the named test instead.
var clusterOnly = map[string]string{
	"sharelog_cluster_role":                  "../cmd/server/cluster_metrics_test.go",
	"sharelog_cluster_lease_epoch":           "../cmd/server/cluster_metrics_test.go",
	"sharelog_cluster_owned_items":           "../cmd/server/cluster_metrics_test.go",
	"sharelog_cluster_forwarded_calls_total": "../cmd/server/cluster_metrics_test.go",
	"sharelog_cluster_partitions_unwritable": "../cmd/server/cluster_metrics_test.go",
	"sharelog_nats_connected":                "../cmd/server/cluster_metrics_test.go",
	"sharelog_nats_reconnects_total":         "../cmd/server/cluster_metrics_test.go",
	"sharelog_nats_rtt_seconds":              "../cmd/server/cluster_metrics_test.go",
}

// Every query of the Grafana dashboard names a metric the server exports:
// each metric name in the panels' PromQL and the variables' label_values
// queries is in a scrape of a real server after the scripted workload.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	exprs := dashboardQueries(t)
	require.NotEmpty(t, exprs)
	fams := metricsWorkload(t)
	names := map[string]bool{}
	for _, e := range exprs {
		ms := promQLMetrics(e)
		require.NotEmpty(t, ms, "no metric in %q", e)
		for _, m := range ms {
			names[m] = true
		}
	}
	for name := range names {
		if file, ok := clusterOnly[name]; ok {
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Contains(t, string(src), "^"+name, "%s is checked in a cluster's scrape by %s", name, file)
			continue
		}
		if file, ok := eventOnly[name]; ok {
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			otelName := `"` + strings.ReplaceAll(strings.TrimSuffix(name, "_total"), "_", ".") + `"`
			assert.Contains(t, string(src), otelName, "%s is declared in %s", name, file)
			continue
		}
		assert.True(t, exported(fams, name), "the dashboard queries %s, which the server does not export", name)
	}
}

// exported says whether name is a family of the scrape, or a histogram's
// _bucket, _sum or _count series.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if fams[name] != nil {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := fams[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
	}
	return false
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// targets of all panels (rows' nested panels too) and the variables'
// queries.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	var out []string
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has a target without expr", p.Title)
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			require.NoError(t, json.Unmarshal(v.Query, &q.Query))
		}
		out = append(out, q.Query)
	}
	return out
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promLabelVals = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	promKeywords  = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless", "inf", "nan"}
)

// promQLMetrics returns the metric names a PromQL expression (or a
// Grafana label_values query) selects: identifiers outside strings, label
// matchers, ranges and grouping clauses that are not calls or keywords.
func promQLMetrics(expr string) []string {
	if m := promLabelVals.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promKeywords, strings.ToLower(id)) {
			continue
		}
		if loc[0] > 0 && (s[loc[0]-1] == '$' || s[loc[0]-1] == '.' || (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9')) {
			continue // a Grafana variable, or part of a number
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		`sharelog_partitions_offline`: {"sharelog_partitions_offline"},
		`histogram_quantile(0.99, sum by (le, rpc_method) (rate(rpc_server_call_duration_seconds_bucket[$__rate_interval])))`: {"rpc_server_call_duration_seconds_bucket"},
		`sharelog_log_high_watermark{topic=~"$topic"} - sharelog_log_start_offset{topic=~"a{b}"}`:                             {"sharelog_log_high_watermark", "sharelog_log_start_offset"},
		`sum by (group) (rate(x_total{group="g"}[5m])) / on(group) y offset 5m`:                                               {"x_total", "y"},
		`label_values(sharelog_share_members, group)`:                                                                         {"sharelog_share_members"},
		`1e3 * z`: {"z"},
	}
	for expr, want := range cases {
		assert.Equal(t, want, promQLMetrics(expr), expr)
	}
}
