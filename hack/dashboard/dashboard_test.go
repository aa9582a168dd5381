package dashboard

import (
	"strings"
	"testing"
)

const (
	dashboardPath = "../../config/grafana/etcd-operator.json"
	metricsPath   = "metrics.txt"
)

// Any values do for parsing: these are Grafana's built-ins the dashboard uses and its own
// variables.
var parseValues = map[string]string{
	"__rate_interval": "1m", "__interval": "30s", "__range": "1h",
	"namespace": "ns", "cluster": "etcd", "datasource": "prometheus",
}

func read(t *testing.T) *Dashboard {
	t.Helper()
	d, err := Read(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The dashboard imports anywhere: its Prometheus is a variable, every panel and query uses it,
// and the namespace and cluster variables list what the operator's series have.
func TestTheDashboardIsImportable(t *testing.T) {
	d := read(t)
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds := vars["datasource"]; ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		t.Errorf("want a datasource variable of Prometheus data sources, got %+v", ds)
	}
	for name, label := range map[string]string{"namespace": "namespace", "cluster": "name"} {
		v := vars[name]
		query, err := v.VariableQuery()
		if err != nil {
			t.Fatal(err)
		}
		selector, got, err := LabelValuesSelector(query)
		if err != nil || got != label || v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s: want label_values(..., %s) on ${datasource}, got %q (%v) on %+v", name, label, query, err, v.Datasource)
			continue
		}
		if _, err := MetricNames(Substitute(selector, parseValues)); err != nil {
			t.Errorf("variable %s: selector %q: %v", name, selector, err)
		}
	}
	panels := d.AllPanels()
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q, query %s: data source %+v, want uid ${datasource}", p.Title, q.RefID, q.Datasource)
			}
		}
	}
}

// Every query parses with Prometheus's parser and names only metrics of metrics.txt: the
// operator's, controller-runtime's, etcd's or Prometheus's own.
func TestEveryQueryNamesKnownMetrics(t *testing.T) {
	known, err := KnownMetrics(metricsPath)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, q := range read(t).Queries() {
		names, err := MetricNames(Substitute(q.Expr, parseValues))
		if err != nil {
			t.Errorf("%s: %q: %v", q, q.Expr, err)
			continue
		}
		for _, name := range names {
			used[name] = true
			if !Known(name, known) {
				t.Errorf("%s: metric %s is in no list of %s", q, name, metricsPath)
			}
		}
	}
	if len(used) == 0 {
		t.Error("the queries name no metric")
	}
}

// The checks above catch what they are for: a query that does not parse, a metric nobody
// exports, a histogram that is not one, a selector without a name.
func TestTheChecksCatchBadQueries(t *testing.T) {
	known := map[string]Metric{"etcd_server_has_leader": {Source: "etcd"}, "etcd_disk_wal_fsync_duration_seconds": {Source: "etcd", Histogram: true}}
	for _, tc := range []struct {
		expr      string
		parseErr  string
		unknownOK bool
	}{
		{expr: `sum(etcd_server_has_leader{name="x"}`, parseErr: "unclosed"},
		{expr: `sum(etcd_server_has_leader{name="x"}) by`, parseErr: "unexpected"},
		{expr: `{name="x"}`, parseErr: "names no metric"},
		{expr: `etcd_server_has_leaderr`},
		{expr: `etcd_server_has_leader_bucket`},
		{expr: `etcd_disk_wal_fsync_duration_seconds`},
		{expr: `rate(etcd_disk_wal_fsync_duration_seconds_bucket[1m])`, unknownOK: true},
		{expr: `etcd_server_has_leader`, unknownOK: true},
	} {
		names, err := MetricNames(tc.expr)
		if tc.parseErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.expr, err, tc.parseErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		allKnown := true
		for _, n := range names {
			allKnown = allKnown && Known(n, known)
		}
		if allKnown != tc.unknownOK {
			t.Errorf("%q: names %v all known: %v, want %v", tc.expr, names, allKnown, tc.unknownOK)
		}
	}
}

func TestSubstitute(t *testing.T) {
	got := Substitute(`rate(x{namespace="$namespace",name="${cluster}"}[$__rate_interval])`, parseValues)
	if want := `rate(x{namespace="ns",name="etcd"}[1m])`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
