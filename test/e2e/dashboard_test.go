//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Rate windows need two scrapes of a counter that moved; the restore and backup series need
// the operator's next look and a scrape.
const dashboardTimeout = 5 * time.Minute

// Every query of the Grafana dashboard (config/grafana), its variables set to one cluster's
// namespace and name, answers with a number from the real Prometheus of make prometheus-deploy
// while the cluster is what the dashboard is for: TLS (certificates to expire), written to
// (fsyncs, commits, requests), backed up once, and restored from that backup into a new
// cluster. A query that answers nothing, or only NaN, is a panel that would say "No data". The
// dashboard's variables list the cluster's namespace and name.
func TestDashboardOnARealPrometheus(t *testing.T) {
	if prometheusNamespace == "" {
		t.Skip("needs the Prometheus of make prometheus-deploy: run with make test-monitoring")
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	prom := findPrometheus(t, prometheusNamespace)
	dash := readDashboard(t)

	ns := testNamespace(t, "e2e-dashboard-")
	f := &backupFixture{ns: ns, s3: startS3Server(t, ns)}
	f.s3.createBucket(t, backupBucket)
	f.cluster = &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "shown", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS:     &etcdv1alpha1.TLSSpec{},
		},
	}
	create(t, f.cluster)
	waitAvailable(t, f.cluster, 3)
	go keepWriting(ctx, t, f.cluster)

	backup := f.createBackup(t, "once", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("dashboard/", f.s3.CredentialsSecret)})
	waitBackupPhase(t, backup, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if backup.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup failed: %+v", backup.Status)
	}
	rs := f.createRestore(t, "from-once", etcdv1alpha1.EtcdRestoreSpec{
		Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}},
		Target: f.newTarget("restored", 1),
	})
	waitRestorePhase(t, rs, restoreTimeout)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
	}

	values := map[string]string{
		"namespace": ns, "cluster": f.cluster.Name,
		// Grafana's $__rate_interval is at least four scrape intervals (here 5 s) and one step.
		"__rate_interval": "1m", "__interval": "15s", "__range": "1h",
	}
	var checks []milestone
	for _, v := range dash.variables {
		checks = append(checks, milestone{"variable " + v.name + " lists " + values[v.name], variableLists(prom, v, substitute(v.selector, values), values[v.name])})
	}
	for _, q := range dash.queries {
		checks = append(checks, milestone{q.String(), answersData(prom, substitute(q.expr, values))})
	}
	prom.milestones(t, dashboardTimeout, checks...)
}

// keepWriting puts a key into c every half second until ctx ends, so that the members fsync,
// commit and serve requests for the rate windows of the dashboard's latency panels.
func keepWriting(ctx context.Context, t *testing.T, c *etcdv1alpha1.EtcdCluster) {
	clientSecret := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.TLSSecrets(c).Client}, clientSecret); err != nil {
		t.Errorf("client certificate: %v", err)
		return
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(clientSecret.Data["ca.crt"])
	pair, err := tls.X509KeyPair(clientSecret.Data["tls.crt"], clientSecret.Data["tls.key"])
	if err != nil {
		t.Errorf("client certificate: %v", err)
		return
	}
	tlsConfig := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	// The host cannot resolve cluster DNS: the Service's cluster IP, under the name the server
	// certificate carries.
	endpoint := resources.ClientServiceName(c.Name) + "." + c.Namespace + ".svc:2379"
	serviceAddr := strings.TrimPrefix(clientServiceEndpoint(t, c), "http://")
	for ctx.Err() == nil {
		// A failed put shows as errors on the gRPC panels, not as a failure of this test.
		_ = putErr(ctx, endpoint, serviceAddr, tlsConfig, "", "")
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// answersData is true when expr answers at least one sample, none of them NaN.
func answersData(prom *prometheus, expr string) func(context.Context) (string, bool, error) {
	return func(ctx context.Context) (string, bool, error) {
		samples, err := prom.query(ctx, expr)
		if err != nil {
			return "", false, err
		}
		ok := len(samples) > 0
		for _, s := range samples {
			ok = ok && !math.IsNaN(s.Value)
		}
		return fmt.Sprintf("%s: %v", expr, samples), ok, nil
	}
}

// variableLists is true when the variable's label_values selector has a series whose label is
// want, the value the test then gives the variable.
func variableLists(prom *prometheus, v dashboardVariable, selector, want string) func(context.Context) (string, bool, error) {
	return func(ctx context.Context) (string, bool, error) {
		samples, err := prom.query(ctx, selector)
		if err != nil {
			return "", false, err
		}
		seen := labelValues(samples, v.label)
		return fmt.Sprintf("%s: %s %v", selector, v.label, seen), slices.Contains(seen, want), nil
	}
}

// dashboard is what the test runs of config/grafana's dashboard; hack/dashboard's test checks
// its structure and that every query parses.
type dashboard struct {
	queries   []dashboardQuery
	variables []dashboardVariable
}

type dashboardQuery struct{ panel, refID, expr string }

func (q dashboardQuery) String() string { return fmt.Sprintf("panel %q, query %s", q.panel, q.refID) }

// dashboardVariable is a query variable, label_values(selector, label).
type dashboardVariable struct{ name, selector, label string }

var labelValuesQuery = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "config/grafana/etcd-operator.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels json.RawMessage `json:"panels"`
	}
	var model struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
				// A string for a datasource variable, {query: ...} for a query variable.
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	var d dashboard
	for _, v := range model.Templating.List {
		if v.Type != "query" {
			continue
		}
		var query struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &query); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValuesQuery.FindStringSubmatch(query.Query)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(selector, label)", v.Name, query.Query)
		}
		d.variables = append(d.variables, dashboardVariable{name: v.Name, selector: m[1], label: m[2]})
	}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		var panels []panel
		if err := json.Unmarshal(raw, &panels); err != nil {
			t.Fatal(err)
		}
		for _, p := range panels {
			for _, target := range p.Targets {
				d.queries = append(d.queries, dashboardQuery{panel: p.Title, refID: target.RefID, expr: target.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(model.Panels)
	if len(d.queries) == 0 || len(d.variables) == 0 {
		t.Fatalf("dashboard has %d queries and %d query variables", len(d.queries), len(d.variables))
	}
	return d
}

// substitute sets Grafana's variables, $name and ${name}, longest name first.
func substitute(expr string, values map[string]string) string {
	names := sortedKeys(values)
	slices.SortStableFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		expr = strings.ReplaceAll(expr, "${"+name+"}", values[name])
		expr = strings.ReplaceAll(expr, "$"+name, values[name])
	}
	return expr
}
