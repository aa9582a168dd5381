// Package dashboard reads a Grafana dashboard's queries and the metrics they name, so that a
// test can hold them to Prometheus's own PromQL parser and to the metrics that exist.
package dashboard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// Dashboard is the part of a Grafana dashboard's JSON model the tests read.
type Dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable; Query is a string or an object with a query field,
// depending on the Grafana version that saved it.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *Datasource     `json:"datasource"`
}

type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is a panel, or a row holding panels.
type Panel struct {
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *Datasource `json:"datasource"`
	Targets    []Target    `json:"targets"`
	Panels     []Panel     `json:"panels"`
}

type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// Query is one target's expression, with the panel it is on.
type Query struct {
	Panel string
	RefID string
	Expr  string
}

func (q Query) String() string { return fmt.Sprintf("panel %q, query %s", q.Panel, q.RefID) }

// Read reads a dashboard; fields the model above leaves out (Grafana has many) are ignored.
func Read(path string) (*Dashboard, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// Queries are the expressions of every panel's targets, rows' panels included.
func (d *Dashboard) Queries() []Query {
	var qs []Query
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				qs = append(qs, Query{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return qs
}

// AllPanels are every panel that is not a row, rows' panels included.
func (d *Dashboard) AllPanels() []Panel {
	var all []Panel
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type != "row" {
				all = append(all, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

// VariableQuery is the query text of a query variable.
func (v Variable) VariableQuery() (string, error) {
	var text string
	if err := json.Unmarshal(v.Query, &text); err == nil {
		return text, nil
	}
	var obj struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &obj); err != nil {
		return "", fmt.Errorf("variable %s: query is neither a string nor {query: ...}: %w", v.Name, err)
	}
	return obj.Query, nil
}

// labelValues is Grafana's label_values(selector, label), which is not PromQL.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// LabelValuesSelector is the series selector of a label_values(selector, label) query.
func LabelValuesSelector(query string) (selector, label string, err error) {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(query))
	if m == nil {
		return "", "", fmt.Errorf("%q is not label_values(selector, label)", query)
	}
	return m[1], m[2], nil
}

// Substitute replaces Grafana's variables, $name and ${name}, with values.
func Substitute(expr string, values map[string]string) string {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	// Longest first: $__rate_interval before a $__rate that would eat its prefix.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, name := range names {
		expr = strings.ReplaceAll(expr, "${"+name+"}", values[name])
		expr = strings.ReplaceAll(expr, "$"+name, values[name])
	}
	return expr
}

var promql = parser.NewParser(parser.Options{})

// MetricNames parses expr with Prometheus's PromQL parser and returns the metric names its
// selectors name, sorted, without duplicates.
func MetricNames(expr string) ([]string, error) {
	node, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var selectorErr error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				selectorErr = fmt.Errorf("selector %s names no metric", vs)
			}
			seen[vs.Name] = true
		}
		return nil
	})
	if selectorErr != nil {
		return nil, selectorErr
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Metric is a metric that exists: where it comes from, and whether it is a histogram, queried
// by its _bucket, _sum and _count series.
type Metric struct {
	Source    string
	Histogram bool
}

// KnownMetrics reads a list of "name source" lines, "name source histogram" for a histogram;
// # starts a comment.
func KnownMetrics(path string) (map[string]Metric, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	known := map[string]Metric{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		histogram := len(fields) == 3 && fields[2] == "histogram"
		if len(fields) != 2 && !histogram {
			return nil, fmt.Errorf("%s:%d: want \"name source\" or \"name source histogram\", got %q", path, line, text)
		}
		known[fields[0]] = Metric{Source: fields[1], Histogram: histogram}
	}
	return known, sc.Err()
}

// histogramSuffixes are the series a histogram family is queried by.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// Known says whether name is a known metric other than a histogram, or a series of a known
// histogram (a histogram's own name has no series).
func Known(name string, known map[string]Metric) bool {
	if m, ok := known[name]; ok {
		return !m.Histogram
	}
	for _, s := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, s); ok {
			if m, ok := known[base]; ok && m.Histogram {
				return true
			}
		}
	}
	return false
}
