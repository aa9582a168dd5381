package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// authClock is the time of the scripted clusters with spec.auth: when the operator sets a
// password, the history says it was set then.
var authClock = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func newAuthCluster(t *testing.T, userPassword string, record *resources.RootRecord, etcdAuth bool, etcdPassword string) *scriptedCluster {
	t.Helper()
	var extra []client.Object
	extra = append(extra, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns"}, Data: map[string][]byte{"password": []byte(userPassword)}})
	withAuth := func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
		if record != nil {
			secret, err := resources.RootCredentials(c, *record)
			if err != nil {
				t.Fatal(err)
			}
			extra = append(extra, secret)
		}
	}
	a := newScriptedCluster(t, 1, withAuth, func() []client.Object { return extra })
	a.etcd.AuthEnabled, a.etcd.RootUser, a.etcd.RootPassword = etcdAuth, etcdPassword != "", etcdPassword
	a.r.Clock = func() time.Time { return authClock }
	return a
}

// record is the operator's record of the root password.
func (a *scriptedCluster) record(t *testing.T) resources.RootRecord {
	t.Helper()
	secret := &corev1.Secret{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.RootCredentialsSecretName("c")}, secret); err != nil {
		t.Fatalf("the operator's record of the root password: %v", err)
	}
	rec, err := resources.ReadRootCredentials(secret)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// passwordSet is a password of the history, set the given number of days before authClock.
func passwordSet(password string, daysBefore int) resources.RootPasswordSet {
	return resources.RootPasswordSet{Password: password, At: metav1.NewTime(authClock.AddDate(0, 0, -daysBefore))}
}

// historyOf is the history, newest first, each password with the days before authClock it
// was set ("original 30d").
func historyOf(rec resources.RootRecord) []string {
	var out []string
	for _, s := range rec.History {
		out = append(out, fmt.Sprintf("%s %dd", s.Password, int(authClock.Sub(s.At.Time).Hours()/24)))
	}
	return out
}

// Rotating the password in the user's Secret changes it in etcd: the operator authenticates
// with the password etcd has (its own record), sets the new one, and records it. Before, it
// authenticated with the user's new password, which etcd refused: it was locked out for good.
func TestRotatedRootPasswordIsChangedInEtcd(t *testing.T) {
	a := newAuthCluster(t, "rotated", &resources.RootRecord{Password: "original", History: []resources.RootPasswordSet{passwordSet("original", 30)}}, true, "original")
	got := a.reconcile(t, 3)
	if pw := a.etcd.Password(); pw != "rotated" {
		t.Fatalf("etcd's root password is %q, want the rotated one (calls %v; conditions %+v)", pw, a.etcd.Calls, got.Status.Conditions)
	}
	if rec := a.record(t); rec.Password != "rotated" || rec.Pending != "" ||
		!slices.Equal(historyOf(rec), []string{"rotated 0d", "original 30d"}) {
		t.Fatalf("record %+v, want the rotated password, nothing pending, and the rotated password set now in the history", rec)
	}
	if slices.Contains(a.etcd.Calls, "EnableAuth") || degradedReason(got) == etcdv1alpha1.ReasonCredentialsRejected {
		t.Fatalf("calls %v, degraded %q", a.etcd.Calls, degradedReason(got))
	}
	if ev := a.events(); !strings.Contains(ev, "ChangeRootPassword") || !strings.Contains(ev, etcdv1alpha1.ReasonAuthWithoutTLS) {
		t.Fatalf("events %q, want the change and the warning about auth without TLS", ev)
	}
	// Once done, nothing more is changed.
	calls := len(a.etcd.Calls)
	a.reconcile(t, 2)
	if len(a.etcd.Calls) != calls {
		t.Fatalf("further calls after the rotation: %v", a.etcd.Calls[calls:])
	}
}

// A change interrupted after etcd took the new password but before the record said so: the
// operator authenticates with the pending password and completes the record, changing nothing.
func TestInterruptedPasswordChangeIsCompletedNotLockedOut(t *testing.T) {
	a := newAuthCluster(t, "rotated", &resources.RootRecord{Password: "original", Pending: "rotated", History: []resources.RootPasswordSet{passwordSet("original", 30)}}, true, "rotated")
	got := a.reconcile(t, 2)
	if rec := a.record(t); rec.Password != "rotated" || rec.Pending != "" || !slices.Equal(historyOf(rec), []string{"rotated 0d", "original 30d"}) {
		t.Fatalf("record %+v, want the password etcd has, nothing pending, and the history with it", rec)
	}
	if len(a.etcd.Calls) != 0 || degradedReason(got) != "" {
		t.Fatalf("calls %v, degraded %q: the change was already done", a.etcd.Calls, degradedReason(got))
	}
}

// A cluster made by an earlier operator version has no record: it is made from the password
// etcd accepts (the user's), and the agent Jobs read it from there. The history begins with it.
func TestRecordIsMadeForAClusterWithoutOne(t *testing.T) {
	a := newAuthCluster(t, "original", nil, true, "original")
	a.reconcile(t, 1)
	if rec := a.record(t); rec.Password != "original" || !slices.Equal(historyOf(rec), []string{"original 0d"}) {
		t.Fatalf("record %+v", rec)
	}
	if len(a.etcd.Calls) != 0 {
		t.Fatalf("calls %v", a.etcd.Calls)
	}
}

// Enabling authentication gives the root user the user's password even if a root user was
// left with another one, records it first, and warns when there is no TLS.
func TestEnableAuthSetsTheUsersPassword(t *testing.T) {
	a := newAuthCluster(t, "wanted", nil, false, "leftover")
	a.reconcile(t, 3)
	if !a.etcd.AuthEnabled || a.etcd.Password() != "wanted" {
		t.Fatalf("auth %v with password %q (calls %v)", a.etcd.AuthEnabled, a.etcd.Password(), a.etcd.Calls)
	}
	if rec := a.record(t); rec.Password != "wanted" || rec.Pending != "" || !slices.Equal(historyOf(rec), []string{"wanted 0d"}) {
		t.Fatalf("record %+v", rec)
	}
	if ev := a.events(); !strings.Contains(ev, etcdv1alpha1.ReasonAuthWithoutTLS) {
		t.Fatalf("events %q, want a warning about auth without TLS", ev)
	}
}

// A password changed outside the operator (etcdctl user passwd), or data restored from a
// snapshot older than every password the history keeps, leaves it no password etcd accepts:
// status says so, names the Secret to fix, and nothing else is attempted.
func TestPasswordUnknownToTheOperatorIsReported(t *testing.T) {
	a := newAuthCluster(t, "pw-wanted", &resources.RootRecord{Password: "pw-original", History: []resources.RootPasswordSet{passwordSet("pw-original", 3), passwordSet("pw-older", 30)}}, true, "pw-by-hand")
	got := a.reconcile(t, 1)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if cond == nil || cond.Reason != etcdv1alpha1.ReasonCredentialsRejected || !strings.Contains(cond.Message, "Put the password etcd has in Secret root") ||
		!strings.Contains(cond.Message, "each of the 2 others the operator has set") {
		t.Fatalf("degraded %+v, want CredentialsRejected saying the history had none etcd accepts and naming Secret root", cond)
	}
	for _, password := range []string{"pw-wanted", "pw-original", "pw-older", "pw-by-hand"} {
		if strings.Contains(cond.Message, password) {
			t.Fatalf("the condition gives a password away: %q", cond.Message)
		}
	}
	if len(a.etcd.Calls) != 0 {
		t.Fatalf("calls %v", a.etcd.Calls)
	}
	if ev := a.events(); !strings.Contains(ev, etcdv1alpha1.ReasonCredentialsRejected) {
		t.Fatalf("events %q", ev)
	}
}

// A cluster whose data was restored from a snapshot taken before a rotation has the password
// in force then: the operator logs in with it from its history, sets the user's, and records
// that; nobody has to put the old password back. Before, it reported CredentialsRejected.
func TestRestoredDataIsLoggedIntoWithAPasswordFromTheHistory(t *testing.T) {
	record := &resources.RootRecord{Password: "current", History: []resources.RootPasswordSet{passwordSet("current", 1), passwordSet("at-snapshot", 10), passwordSet("oldest", 40)}}
	a := newAuthCluster(t, "current", record, true, "at-snapshot")
	got := a.reconcile(t, 3)
	if pw := a.etcd.Password(); pw != "current" || !slices.Contains(a.etcd.Calls, "SetRootPassword") {
		t.Fatalf("etcd's root password is %q, want the user's (calls %v; conditions %+v)", pw, a.etcd.Calls, got.Status.Conditions)
	}
	if reason := degradedReason(got); reason != "" {
		t.Fatalf("degraded %q", reason)
	}
	if rec := a.record(t); rec.Password != "current" || rec.Pending != "" || !slices.Equal(historyOf(rec), []string{"current 0d", "at-snapshot 10d", "oldest 40d"}) {
		t.Fatalf("record %+v, want the user's password, set now, and the older ones kept", rec)
	}
	if ev := a.events(); !strings.Contains(ev, "ChangeRootPassword") || strings.Contains(ev, etcdv1alpha1.ReasonCredentialsRejected) {
		t.Fatalf("events %q, want the change and no CredentialsRejected", ev)
	}
}

// The passwords tried, in order: the one etcd was last given, the one being set, the user's,
// then the history newest first; each once, and none empty.
func TestLoginPasswords(t *testing.T) {
	history := []resources.RootPasswordSet{passwordSet("c", 1), passwordSet("b", 5), passwordSet("a", 9)}
	for _, tc := range []struct {
		name    string
		known   resources.RootRecord
		desired string
		want    []string
	}{
		{"no record yet", resources.RootRecord{}, "u", []string{"u"}},
		{"steady", resources.RootRecord{Password: "c", History: history}, "c", []string{"c", "b", "a"}},
		{"rotation asked", resources.RootRecord{Password: "c", History: history}, "u", []string{"c", "u", "b", "a"}},
		{"change under way", resources.RootRecord{Password: "c", Pending: "u", History: history}, "u", []string{"c", "u", "b", "a"}},
		{"restored, record not yet made", resources.RootRecord{History: history}, "c", []string{"c", "b", "a"}},
		{"the user put an old one back", resources.RootRecord{Password: "c", History: history}, "a", []string{"c", "a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := loginPasswords(tc.known, tc.desired); !slices.Equal(got, tc.want) {
				t.Fatalf("tried %v, want %v", got, tc.want)
			}
		})
	}
}

// etcd with authentication on refuses a client with no user: a cluster without spec.auth
// whose data was restored from a snapshot of a cluster with it, or whose authentication was
// turned on by hand. Status says so, with the fix, in Degraded and a Warning event, and
// nothing is decided on what the operator could not see: not a lost quorum, not a cluster
// still to form, not members that did not answer. etcd 3.6 refuses the member list
// (etcdfake does as it does); an etcd that served it would refuse the members' status.
func TestEtcdRefusingTheOperatorsUserIsReportedWithTheFix(t *testing.T) {
	for name, tc := range map[string]struct {
		formed bool
		refuse func(*etcdfake.Cluster)
	}{
		"formed, the member list refused": {true, func(f *etcdfake.Cluster) { f.AuthEnabled, f.RootUser, f.RootPassword = true, true, "then" }},
		"never formed (restored), the member list refused": {false, func(f *etcdfake.Cluster) {
			f.AuthEnabled, f.RootUser, f.RootPassword = true, true, "then"
		}},
		"formed, the members' status refused": {true, func(f *etcdfake.Cluster) { f.Fail = map[string]error{"Status": rpctypes.ErrUserEmpty} }},
	} {
		t.Run(name, func(t *testing.T) {
			a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
				if !tc.formed {
					c.Status.ClusterID = ""
				}
			}, nil)
			tc.refuse(a.etcd)
			got := a.reconcile(t, 2)

			degraded := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionDegraded)
			if degraded == nil || degraded.Status != metav1.ConditionTrue || degraded.Reason != etcdv1alpha1.ReasonAuthRequired ||
				!strings.Contains(degraded.Message, "user name is empty") || !strings.Contains(degraded.Message, "set spec.auth.rootSecretName") {
				t.Fatalf("Degraded %+v, want True AuthRequired with etcd's refusal and the fix (spec.auth.rootSecretName)", degraded)
			}
			available := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionAvailable)
			if available == nil || available.Status != metav1.ConditionUnknown || available.Reason != etcdv1alpha1.ReasonAuthRequired {
				t.Fatalf("Available %+v, want Unknown AuthRequired: whether clients are served is not known", available)
			}
			if got.Status.QuorumLostTime != nil || strings.Contains(degraded.Message, "did not answer") {
				t.Fatalf("status reports what was not observed: quorum lost at %v, Degraded %q", got.Status.QuorumLostTime, degraded.Message)
			}
			if len(a.etcd.Calls) != 0 {
				t.Fatalf("calls %v: nothing is done on what could not be observed", a.etcd.Calls)
			}
			if ev := a.events(); strings.Count(ev, "Warning "+etcdv1alpha1.ReasonAuthRequired) != 1 {
				t.Fatalf("events %q, want one Warning AuthRequired", ev)
			}
			if !tc.formed || a.etcd.Fail != nil {
				return
			}

			// The fix the condition names: spec.auth, with root's password in its Secret.
			if err := a.k8s.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns"},
				Data: map[string][]byte{"password": []byte("then")}}); err != nil {
				t.Fatal(err)
			}
			got.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
			if err := a.k8s.Update(t.Context(), got); err != nil {
				t.Fatal(err)
			}
			got = a.reconcile(t, 2)
			if !meta.IsStatusConditionTrue(got.Status.Conditions, etcdv1alpha1.ConditionAvailable) || degradedReason(got) != "" {
				t.Fatalf("with spec.auth and root's password: conditions %+v, want Available and not Degraded", got.Status.Conditions)
			}
		})
	}
}

// A refusal of the operator's calls once logged in as root is reported as credentials etcd
// rejects, with etcd's words, never as members that did not answer.
func TestEtcdRefusingRootsCallsIsReported(t *testing.T) {
	a := newAuthCluster(t, "pw", &resources.RootRecord{Password: "pw", History: []resources.RootPasswordSet{passwordSet("pw", 3)}}, true, "pw")
	a.etcd.Fail = map[string]error{"Status": rpctypes.ErrPermissionDenied}
	got := a.reconcile(t, 1)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if cond == nil || cond.Reason != etcdv1alpha1.ReasonCredentialsRejected || !strings.Contains(cond.Message, "permission denied") ||
		!strings.Contains(cond.Message, "Secret root") {
		t.Fatalf("Degraded %+v, want CredentialsRejected with etcd's refusal, naming Secret root", cond)
	}
}
