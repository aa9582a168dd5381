package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The dashboard's test (hack/dashboard) holds every query to the metrics its metrics.txt lists;
// the operator's part of that list is what this package registers, no more, no less, so a
// metric renamed here fails one of the two tests.
func TestDashboardMetricsListTheOperatorsFamilies(t *testing.T) {
	raw, err := os.ReadFile("../../hack/dashboard/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(raw)) {
		if fields := strings.Fields(line); len(fields) >= 2 && !strings.HasPrefix(fields[0], "#") && fields[1] == "operator" {
			listed = append(listed, fields[0])
		}
	}
	slices.Sort(listed)
	registered := registeredFamilies()
	for _, name := range registered {
		if !slices.Contains(listed, name) {
			t.Errorf("hack/dashboard/metrics.txt does not list %s, which the operator registers", name)
		}
	}
	for _, name := range listed {
		if !slices.Contains(registered, name) {
			t.Errorf("hack/dashboard/metrics.txt lists %s as the operator's, which registers no such family", name)
		}
	}
	if len(registered) == 0 {
		t.Error("no family registered")
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredFamilies are the names of every family of the package's collectors, sorted.
func registeredFamilies() []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range []prometheus.Collector{Clusters, Backups, Restores} {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		// A Desc keeps its name private; its String says it.
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return names
}
