//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The namespace of the Prometheus make prometheus-deploy runs (test/prometheus): it scrapes the
// operator and every member as config/prometheus's monitors would, every 5 s, and evaluates
// config/prometheus's alert rules as shipped.
var prometheusNamespace = os.Getenv("E2E_PROMETHEUS_NAMESPACE")

// E2E_MONITORING_MEMBERS_DOWN_FIRES=1 keeps the member down until etcdMembersDown fires too,
// past its 20-minute `for:`: the test then takes ~25 minutes rather than ~8.
var waitMembersDownFires = os.Getenv("E2E_MONITORING_MEMBERS_DOWN_FIRES") != ""

const (
	// The longest `for:` the test waits out is EtcdClusterQuorumAtRisk's 5 minutes; on top come
	// the operator's look (30 s when steady), a scrape and an evaluation (5 s each); the backup
	// alerts need a failed run and twice the 1-minute schedule.
	alertTimeout = 10 * time.Minute
	// The member comes back at the operator's next try to make its pod, which backs off while
	// the API server refuses it (up to minutes after a long refusal), then rejoins on its data.
	healTimeout = 10 * time.Minute
)

// A real Prometheus, scraping the operator and the members with the shipped monitors' scrape
// configuration, loads every shipped rule unchanged; it sees a 3-member cluster as such, the
// operator's series and the members' own; with one member's pod killed and kept from coming back
// (the API server refuses it, as a node that cannot take it would), the operator's healthy
// members go to 2, etcdMembersDown's expression holds, and still does once the member's target
// is gone (pending: its `for:` is 20 minutes; with E2E_MONITORING_MEMBERS_DOWN_FIRES, until it
// fires), and EtcdClusterQuorumAtRisk fires after its 5 minutes; once the pod may be made again,
// the operator brings the member back and both resolve. A scheduled backup to a bucket that does
// not exist fires EtcdBackupFailing and, past twice its schedule, EtcdBackupTooOld.
//
// Prometheus evaluates every 5 s rather than every 30 s or minute: that only sets how soon an
// expression is checked, while each rule's `for:` is the shipped one (checked below), so no
// alert fires sooner than it would in production.
func TestAlertsOnARealPrometheus(t *testing.T) {
	if prometheusNamespace == "" {
		t.Skip("needs the Prometheus of make prometheus-deploy: run with make test-monitoring")
	}
	ctx := context.Background()
	prom := findPrometheus(t, prometheusNamespace)

	requireShippedRulesLoaded(t, prom)
	prom.waitFor(t, "the operator scraped", readyTimeout, func(ctx context.Context) (string, bool, error) {
		up, err := prom.query(ctx, `up{job="etcd-operator-controller-manager-metrics-service"}`)
		return fmt.Sprintf("up %v", up), len(up) == 1 && up[0].Value == 1, err
	})

	f := newBackupFixture(t, "e2e-monitoring-")
	c := f.cluster
	of := fmt.Sprintf(`namespace=%q,name=%q`, c.Namespace, c.Name)
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	members := memberNames(c)

	prom.waitFor(t, "3 healthy members, 3 voters, quorum 2", readyTimeout, operatorSees(prom, of, 3))
	prom.waitFor(t, "the members' own series", readyTimeout, func(ctx context.Context) (string, bool, error) {
		hasLeader, err := prom.query(ctx, `etcd_server_has_leader{job="etcd-operator-members",`+of+`}`)
		if err != nil {
			return "", false, err
		}
		leaders, err := prom.query(ctx, `sum(etcd_server_is_leader{job="etcd-operator-members",`+of+`})`)
		if err != nil {
			return "", false, err
		}
		seen := labelValues(hasLeader, "member")
		ok := slices.Equal(seen, members) && len(leaders) == 1 && leaders[0].Value == 1
		for _, s := range hasLeader {
			ok = ok && s.Value == 1
		}
		return fmt.Sprintf("etcd_server_has_leader %v, leaders %v; members %v", hasLeader, leaders, members), ok, err
	})
	if firing := prom.activeAlerts(t, c.Namespace, "firing"); len(firing) > 0 {
		t.Fatalf("alerts firing for a healthy cluster: %v", firing)
	}

	// Every minute, to a bucket the server does not have: each run fails.
	nowhere := f.s3Destination("", f.s3.CredentialsSecret)
	nowhere.S3.Bucket = "no-such-bucket"
	backup := f.createBackup(t, "failing", etcdv1alpha1.EtcdBackupSpec{Schedule: "* * * * *", Destination: nowhere})
	ofBackup := fmt.Sprintf(`namespace=%q,name=%q`, backup.Namespace, backup.Name)

	victim := memberPods(t, c)[0]
	allow := refusePod(t, &victim)
	if err := k8sClient.Delete(ctx, &victim, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed member %s; its pod is refused until the test allows it", victim.Name)

	down := []milestone{
		{"the operator: 2 healthy members of 3 voters, quorum 2", operatorSees(prom, of, 2)},
		{"the killed member's target gone, the 2 others up", func(ctx context.Context) (string, bool, error) {
			up, err := prom.query(ctx, `up{job="etcd-operator-members",`+of+`}`)
			alive := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == victim.Name })
			ok := slices.Equal(labelValues(up, "member"), alive)
			for _, s := range up {
				ok = ok && s.Value == 1
			}
			return fmt.Sprintf("up %v", up), ok, err
		}},
		{"etcdMembersDown pending", prom.alertIs("etcdMembersDown", of, "pending", "firing")},
		{"EtcdClusterQuorumAtRisk firing", prom.alertIs("EtcdClusterQuorumAtRisk", of, "firing")},
		{"EtcdBackupFailing firing", prom.alertIs("EtcdBackupFailing", ofBackup, "firing")},
		{"EtcdBackupTooOld firing", prom.alertIs("EtcdBackupTooOld", ofBackup, "firing")},
	}
	timeout := alertTimeout
	if waitMembersDownFires {
		down = append(down, milestone{"etcdMembersDown firing", prom.alertIs("etcdMembersDown", of, "firing")})
		timeout = 20*time.Minute + alertTimeout
	}
	prom.milestones(t, timeout, down...)

	// Minutes into the outage, the member's target long gone: only the peers' failures to reach
	// it still say it is down (the expression as the mixin has it lost them here).
	if seen, ok, err := prom.alertIs("etcdMembersDown", of, "pending", "firing")(ctx); !ok || err != nil {
		t.Errorf("etcdMembersDown no longer active with the member's target gone: %s %v", seen, err)
	}

	allow()
	t.Logf("member %s's pod allowed again", victim.Name)
	prom.milestones(t, healTimeout,
		milestone{"the operator: 3 healthy members again", operatorSees(prom, of, 3)},
		milestone{"the member's target up again", func(ctx context.Context) (string, bool, error) {
			up, err := prom.query(ctx, `up{job="etcd-operator-members",`+of+`} == 1`)
			return fmt.Sprintf("up %v", up), slices.Equal(labelValues(up, "member"), members), err
		}},
		milestone{"EtcdClusterQuorumAtRisk resolved", prom.alertIs("EtcdClusterQuorumAtRisk", of)},
		milestone{"etcdMembersDown resolved", prom.alertIs("etcdMembersDown", of)},
	)
}

// requireShippedRulesLoaded checks that Prometheus evaluates every alert of
// config/prometheus/prometheusrule.yaml, in its group, with its `for:`, without error.
func requireShippedRulesLoaded(t *testing.T, prom *prometheus) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "config/prometheus/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert string `json:"alert"`
					For   string `json:"for"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &shipped); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, g := range shipped.Spec.Groups {
		for _, r := range g.Rules {
			var d time.Duration
			if r.For != "" {
				if d, err = time.ParseDuration(r.For); err != nil {
					t.Fatalf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			want = append(want, fmt.Sprintf("%s/%s for %v: ok", g.Name, r.Alert, d))
		}
	}
	sort.Strings(want)
	prom.waitFor(t, fmt.Sprintf("the %d shipped alerts loaded and evaluated", len(want)), readyTimeout, func(ctx context.Context) (string, bool, error) {
		var data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string  `json:"name"`
					Duration  float64 `json:"duration"`
					Health    string  `json:"health"`
					LastError string  `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := prom.get(ctx, "/api/v1/rules", url.Values{"type": {"alert"}}, &data); err != nil {
			return "", false, err
		}
		var got []string
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				health := r.Health
				if r.LastError != "" {
					health += " (" + r.LastError + ")"
				}
				got = append(got, fmt.Sprintf("%s/%s for %v: %s", g.Name, r.Name, time.Duration(r.Duration*float64(time.Second)), health))
			}
		}
		sort.Strings(got)
		return fmt.Sprintf("loaded %q, want %q", got, want), slices.Equal(got, want), nil
	})
}

// operatorSees is true when the operator's series say the cluster has healthy healthy members
// of its 3 voters, with a quorum of 2.
func operatorSees(prom *prometheus, of string, healthy int) func(context.Context) (string, bool, error) {
	return func(ctx context.Context) (string, bool, error) {
		want := map[string]float64{
			"etcd_operator_cluster_healthy_members":        float64(healthy),
			"etcd_operator_cluster_healthy_voting_members": float64(healthy),
			"etcd_operator_cluster_voting_members":         3,
			"etcd_operator_cluster_quorum":                 2,
		}
		got := map[string][]float64{}
		ok := true
		for metric, value := range want {
			samples, err := prom.query(ctx, metric+"{"+of+"}")
			if err != nil {
				return "", false, err
			}
			for _, s := range samples {
				got[metric] = append(got[metric], s.Value)
			}
			ok = ok && len(samples) == 1 && samples[0].Value == value
		}
		return fmt.Sprintf("%v", got), ok, nil
	}
}

// refusePod makes the API server refuse to create the pod again (a ValidatingAdmissionPolicy
// bound to its namespace), as a node that cannot take it would, until allow is called: deleted,
// it stays down for as long as the test needs, and the operator keeps trying. It returns once the
// refusal is in force.
func refusePod(t *testing.T, pod *corev1.Pod) (allow func()) {
	t.Helper()
	ctx := context.Background()
	name := "e2e-refuse-" + pod.Namespace + "-" + pod.Name
	match := &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: pod.Namespace}},
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}}},
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: match,
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q", pod.Name),
				Message:    "the e2e test keeps member " + pod.Name + " down",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    match,
		},
	}
	create(t, policy)
	create(t, binding)
	allow = func() {
		for _, obj := range []client.Object{binding, policy} {
			if err := ignoreNotFound(k8sClient.Delete(ctx, obj)); err != nil {
				t.Errorf("delete %s: %v", obj.GetName(), err)
			}
		}
	}
	t.Cleanup(allow)

	// A dry run of the pod's creation passes admission before storage says it exists.
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels}, Spec: *pod.Spec.DeepCopy()}
	again.Spec.NodeName = ""
	waitFor(t, "the API server refusing pod "+pod.Name, func(ctx context.Context) (bool, error) {
		err := k8sClient.Create(ctx, again.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), name), nil
	})
	return allow
}

// prometheus answers queries over its HTTP API, at its Service's cluster IP, which this host
// reaches through kube-proxy.
type prometheus struct {
	url  string
	http *http.Client
}

func findPrometheus(t *testing.T, namespace string) *prometheus {
	t.Helper()
	svc := &corev1.Service{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "prometheus"}, svc); err != nil {
		t.Fatalf("Prometheus's Service (make prometheus-deploy): %v", err)
	}
	return &prometheus{url: fmt.Sprintf("http://%s:9090", svc.Spec.ClusterIP), http: &http.Client{Timeout: 10 * time.Second}}
}

// get decodes the data of an API answer into data.
func (p *prometheus) get(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s %v: %s %s: %w", path, params, resp.Status, body, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("GET %s %v: %s %s", path, params, resp.Status, body)
	}
	return json.Unmarshal(answer.Data, data)
}

type sample struct {
	Metric map[string]string
	Value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.Metric, s.Value) }

func (p *prometheus) query(ctx context.Context, expr string) ([]sample, error) {
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	samples := make([]sample, 0, len(data.Result))
	for _, r := range data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %v: %w", expr, r.Value, err)
		}
		samples = append(samples, sample{Metric: r.Metric, Value: v})
	}
	return samples, nil
}

type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func (a alert) String() string {
	return fmt.Sprintf("%s %s since %s %v", a.Labels["alertname"], a.State, a.ActiveAt.Format(time.TimeOnly), a.Labels)
}

func (p *prometheus) alerts(ctx context.Context) ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

func (p *prometheus) activeAlerts(t *testing.T, namespace, state string) []alert {
	t.Helper()
	all, err := p.alerts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(a alert) bool { return a.Labels["namespace"] != namespace || a.State != state })
}

// alertIs is true when the alert of the object that of selects (namespace="…",name="…") is in
// one of states, or, without states, when it is not active at all.
func (p *prometheus) alertIs(name, of string, states ...string) func(context.Context) (string, bool, error) {
	return func(ctx context.Context) (string, bool, error) {
		all, err := p.alerts(ctx)
		if err != nil {
			return "", false, err
		}
		var mine []alert
		for _, a := range all {
			if a.Labels["alertname"] == name && of == fmt.Sprintf(`namespace=%q,name=%q`, a.Labels["namespace"], a.Labels["name"]) {
				mine = append(mine, a)
			}
		}
		if len(states) == 0 {
			return fmt.Sprintf("%v", mine), len(mine) == 0, nil
		}
		return fmt.Sprintf("%v", mine), len(mine) > 0 && slices.Contains(states, mine[0].State), nil
	}
}

// waitFor polls check every 2 s until it holds; check says what it saw.
func (p *prometheus) waitFor(t *testing.T, what string, timeout time.Duration, check func(context.Context) (string, bool, error)) {
	t.Helper()
	p.milestones(t, timeout, milestone{what, check})
}

type milestone struct {
	what  string
	check func(ctx context.Context) (seen string, ok bool, err error)
}

// milestones polls every check until each has held once, logging when, counted from the call;
// an error of the API is retried until the timeout, the last one reported.
func (p *prometheus) milestones(t *testing.T, timeout time.Duration, ms ...milestone) {
	t.Helper()
	start := time.Now()
	reached := make([]bool, len(ms))
	last := make([]string, len(ms))
	for {
		done := true
		for i, m := range ms {
			if reached[i] {
				continue
			}
			seen, ok, err := m.check(context.Background())
			switch {
			case err != nil:
				last[i] = err.Error()
			case ok:
				reached[i] = true
				t.Logf("after %v: %s: %s", time.Since(start).Round(time.Second), m.what, seen)
			default:
				last[i] = seen
			}
			done = done && reached[i]
		}
		if done {
			return
		}
		if time.Since(start) > timeout {
			for i, m := range ms {
				if !reached[i] {
					t.Errorf("%s: not after %v; last seen: %s", m.what, timeout, last[i])
				}
			}
			t.FailNow()
		}
		time.Sleep(2 * time.Second)
	}
}

func labelValues(samples []sample, label string) []string {
	values := make([]string, 0, len(samples))
	for _, s := range samples {
		values = append(values, s.Metric[label])
	}
	sort.Strings(values)
	return values
}
