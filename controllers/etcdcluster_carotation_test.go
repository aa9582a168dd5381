package controllers

import (
	"context"
	"crypto/x509"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// rotationWorld plays the members' part in a CA rotation driven by the real reconciler: a
// member's etcd trusts the ca.crt its pod found when it started (read once, as etcd does), and
// presents the leaf its Secret holds now (read at each handshake). A pod the reconciler makes
// starts, Ready, at the next turn.
type rotationWorld struct {
	a *scriptedCluster
	// loaded is, by member, the CAs (fingerprints) its etcd read when its pod started; none
	// while it has no running pod.
	loaded map[string][]string
}

func (w *rotationWorld) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := w.a.k8s.Get(t.Context(), client.ObjectKey{Namespace: w.a.cluster.Namespace, Name: name}, s); err != nil {
		t.Fatalf("get Secret %s: %v", name, err)
	}
	return s
}

func (w *rotationWorld) pod(t *testing.T, member string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := w.a.k8s.Get(t.Context(), client.ObjectKey{Namespace: w.a.cluster.Namespace, Name: member}, p); err != nil {
		return nil
	}
	return p
}

// start runs the etcd of every pod that has not started: Ready, trusting what its mount holds.
func (w *rotationWorld) start(t *testing.T) {
	t.Helper()
	for _, m := range w.a.members {
		p := w.pod(t, m)
		if p == nil || !p.DeletionTimestamp.IsZero() {
			delete(w.loaded, m)
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			if w.loaded[m] == nil {
				w.loaded[m] = certs.BundleFingerprints(w.secret(t, resources.TLSSecrets(w.a.cluster).Peer).Data[certs.KeyCA])
			}
			continue
		}
		p.Status = corev1.PodStatus{PodIP: "10.0.0.9", Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := w.a.k8s.Status().Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		w.loaded[m] = certs.BundleFingerprints(w.secret(t, resources.TLSSecrets(w.a.cluster).Peer).Data[certs.KeyCA])
	}
}

// probe is the reconciler's handshake with a member's port.
func (w *rotationWorld) probe(t *testing.T) func(context.Context, string, map[string]*x509.Certificate, []etcd.TrustProbe) (etcd.TrustSeen, error) {
	return func(_ context.Context, addr string, cas map[string]*x509.Certificate, probes []etcd.TrustProbe) (etcd.TrustSeen, error) {
		member, _, _ := strings.Cut(addr, ".")
		p := w.pod(t, member)
		if p == nil || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
			return etcd.TrustSeen{}, errors.New("connection refused")
		}
		names := resources.TLSSecrets(w.a.cluster)
		leaf := names.Server
		if strings.HasSuffix(addr, ":2380") {
			leaf = names.Peer
		}
		seen := etcd.TrustSeen{Presents: certs.IssuerIn(w.secret(t, leaf).Data[certs.KeyCert], slices.Collect(maps.Values(cas)))}
		for _, pr := range probes {
			if slices.Contains(w.loaded[member], pr.CA) {
				seen.Trusts = append(seen.Trusts, pr.CA)
			}
		}
		return seen, nil
	}
}

// check is what must hold between any two steps: at most one member down, every running
// member trusting the CA of every leaf in use, and the leader never the member taken down.
func (w *rotationWorld) check(t *testing.T, leaderBefore string) {
	t.Helper()
	names := resources.TLSSecrets(w.a.cluster)
	var inUse []string
	for _, n := range []string{names.Peer, names.Server, names.Client} {
		cas, err := certs.ParseBundle(w.secret(t, "c-ca-rotation-probe-cas").Data["all"])
		if err != nil {
			t.Fatal(err)
		}
		inUse = append(inUse, certs.IssuerIn(w.secret(t, n).Data[certs.KeyCert], cas))
	}
	down := 0
	for _, m := range w.a.members {
		p := w.pod(t, m)
		if p == nil || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
			down++
			if m == leaderBefore {
				t.Fatalf("member %s was taken down while it led", m)
			}
			continue
		}
		for _, ca := range inUse {
			if !slices.Contains(w.loaded[m], ca) {
				t.Fatalf("member %s trusts %v, not %s, the CA of a certificate in use: peers or the operator are refused", m, w.loaded[m], ca)
			}
		}
	}
	if down > 1 {
		t.Fatalf("%d members down at once", down)
	}
}

func (w *rotationWorld) leader() string {
	for _, m := range w.a.etcd.Members {
		if w.a.etcd.Statuses[m.ClientURLs[0]].LeaderID == m.ID {
			return m.Name
		}
	}
	return ""
}

// A CA rotation asked for by the annotation runs to Done against members that behave as etcd
// does (trust read at start, leaf at each handshake): one member down at a time, never the
// leader, every certificate in use trusted by every running member after every reconcile.
func TestCARotationReplacesTheCAOneMemberAtATime(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderOperator,
			Validity: &metav1.Duration{Duration: 90 * 24 * time.Hour}, RenewBefore: &metav1.Duration{Duration: 30 * 24 * time.Hour}}
	}, nil)
	w := &rotationWorld{a: a, loaded: map[string][]string{}}
	a.r.ProbeTrust = w.probe(t)
	a.reconcile(t, 2)
	w.start(t)
	oldCA := w.secret(t, resources.CASecretName("c")).Data[certs.KeyCert]

	cluster := a.reconcile(t, 0)
	cluster.Annotations = map[string]string{etcdv1alpha1.AnnotationRotateCA: "2026-11-28"}
	if err := a.k8s.Update(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	var phases []etcdv1alpha1.CARotationPhase
	var events strings.Builder
	for i := 0; ; i++ {
		events.WriteString(a.events())
		if i > 200 {
			t.Fatalf("the rotation did not complete in 200 reconciles; phases %v, status %+v", phases, cluster.Status.CARotation)
		}
		leader := w.leader()
		if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}); err != nil && !strings.Contains(err.Error(), "conflict") {
			t.Fatalf("reconcile: %v", err)
		}
		cluster = a.reconcile(t, 0)
		if rot := cluster.Status.CARotation; rot != nil {
			if len(phases) == 0 || phases[len(phases)-1] != rot.Phase {
				phases = append(phases, rot.Phase)
			}
			w.recordProbeCAs(t, oldCA)
			w.check(t, leader)
			if rot.Phase == etcdv1alpha1.CARotationPhase(certs.RotationDone) {
				break
			}
		}
		w.start(t)
	}
	want := []etcdv1alpha1.CARotationPhase{"Prepare", "TrustBoth", "Reissue", "DropOld", "Done"}
	if !slices.Equal(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	rot := cluster.Status.CARotation
	if rot.Trigger != caRotationTriggerRequested || rot.Annotation != "2026-11-28" || rot.CompletionTime == nil {
		t.Errorf("record %+v", rot)
	}
	newCA := w.secret(t, resources.CASecretName("c")).Data[certs.KeyCert]
	if string(newCA) == string(oldCA) {
		t.Fatal("the CA Secret still holds the old CA")
	}
	cas, _ := certs.ParseBundle(newCA)
	newFP := certs.Fingerprint(cas[0])
	if rot.NewCA != newFP {
		t.Errorf("status.caRotation.newCA %s, the CA Secret holds %s", rot.NewCA, newFP)
	}
	for _, m := range a.members {
		if !slices.Equal(w.loaded[m], []string{newFP}) {
			t.Errorf("member %s ends trusting %v, want the new CA alone", m, w.loaded[m])
		}
	}
	names := resources.TLSSecrets(a.cluster)
	for _, n := range []string{names.Peer, names.Server, names.Client} {
		s := w.secret(t, n)
		if certs.IssuerIn(s.Data[certs.KeyCert], cas) != newFP || !slices.Equal(certs.BundleFingerprints(s.Data[certs.KeyCA]), []string{newFP}) {
			t.Errorf("Secret %s: its certificate is not of the new CA, or its ca.crt is not the new CA alone", n)
		}
	}
	a.reconcile(t, 1)
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.CARotationSecretName("c")}, &corev1.Secret{}); err == nil {
		t.Error("the rotation's Secret, whose probe certificates members accept, is kept after Done")
	}
	if e := events.String(); !strings.Contains(e, "CARotationStarted") {
		t.Errorf("no event says the rotation started:\n%s", e)
	}

	// The same annotation asks for nothing more.
	a.reconcile(t, 3)
	if got := a.reconcile(t, 0).Status.CARotation; got.Phase != etcdv1alpha1.CARotationPhase(certs.RotationDone) || !got.StartTime.Equal(&rot.StartTime) {
		t.Errorf("a second rotation began on the annotation the first was made for: %+v", got)
	}
}

// recordProbeCAs keeps, for check, the old CA and (once made) the new one in a Secret of the
// test's own: the rotation's Secret is deleted at the end.
func (w *rotationWorld) recordProbeCAs(t *testing.T, oldCA []byte) {
	t.Helper()
	all := certs.JoinBundle(oldCA)
	rot := &corev1.Secret{}
	if err := w.a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.CARotationSecretName("c")}, rot); err == nil {
		all = certs.JoinBundle(oldCA, rot.Data[rotationNewCACert])
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-ca-rotation-probe-cas"}, Data: map[string][]byte{"all": all}}
	existing := &corev1.Secret{}
	if err := w.a.k8s.Get(t.Context(), client.ObjectKeyFromObject(s), existing); err == nil {
		if len(all) <= len(existing.Data["all"]) {
			return
		}
		existing.Data = s.Data
		if err := w.a.k8s.Update(t.Context(), existing); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := w.a.k8s.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// A rotation begins on a new value of the annotation, or once the CA has less than
// tls.caRenewBefore left (validity + renewBefore by default); never while one is under way,
// and never twice for the same value.
func TestCARotationBeginsOnTheAnnotationOrBeforeTheCAExpires(t *testing.T) {
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	ca, err := certs.NewCA("c-ca", 900*24*time.Hour, now) // 10 × a validity of 90 days
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	tlsSpec := func(caRenewBefore time.Duration) *etcdv1alpha1.TLSSpec {
		s := &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderOperator,
			Validity: &metav1.Duration{Duration: 90 * day}, RenewBefore: &metav1.Duration{Duration: 30 * day}}
		if caRenewBefore > 0 {
			s.CARenewBefore = &metav1.Duration{Duration: caRenewBefore}
		}
		return s
	}
	done := &etcdv1alpha1.CARotationStatus{Phase: "Done", Annotation: "a"}
	underway := &etcdv1alpha1.CARotationStatus{Phase: "TrustBoth", Annotation: "a"}
	for _, tc := range []struct {
		name          string
		at            time.Duration
		caRenewBefore time.Duration
		annotation    string
		last          *etcdv1alpha1.CARotationStatus
		want          string
	}{
		{name: "young CA, no annotation", at: day},
		{name: "the annotation", at: day, annotation: "a", want: caRotationTriggerRequested},
		{name: "the annotation the last rotation was made for", at: day, annotation: "a", last: done},
		{name: "a new value", at: day, annotation: "b", last: done, want: caRotationTriggerRequested},
		{name: "a new value while one is under way", at: day, annotation: "b", last: underway},
		{name: "before validity + renewBefore is left", at: 900*day - 121*day},
		{name: "once validity + renewBefore is left", at: 900*day - 119*day, want: caRotationTriggerAuto},
		{name: "once caRenewBefore is left", at: 900*day - 9*day, caRenewBefore: 10 * day, want: caRotationTriggerAuto},
		{name: "before caRenewBefore is left", at: 900*day - 11*day, caRenewBefore: 10 * day},
		{name: "due, but one is under way", at: 900*day - day, last: underway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: etcdv1alpha1.EtcdClusterSpec{TLS: tlsSpec(tc.caRenewBefore)},
				Status: etcdv1alpha1.EtcdClusterStatus{CARotation: tc.last}}
			if tc.annotation != "" {
				c.Annotations = map[string]string{etcdv1alpha1.AnnotationRotateCA: tc.annotation}
			}
			got, why, err := caRotationToBegin(c, ca.CertPEM, now.Add(tc.at))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("a rotation begins (%s): %+v", why, got)
			case tc.want != "" && got == nil:
				t.Errorf("no rotation begins, want one by %s", tc.want)
			case got != nil && (got.Trigger != tc.want || got.Phase != "Prepare" || got.OldCA == "" || got.Annotation != tc.annotation || why == ""):
				t.Errorf("rotation %+v (%s), want trigger %s from Prepare", got, why, tc.want)
			}
		})
	}
}

// With tls.provider Secrets, a change of the CAs the user's Secrets hold (ca.crt of the peer or
// server Secret) is loaded by restarting members one at a time, as a changed spec is; a
// renewed leaf alone restarts nothing (etcd reads it at each handshake). Pods made before the
// record existed get it without a restart.
func TestSecretsProviderRestartsMembersOneAtATimeWhenTheirCAsChange(t *testing.T) {
	now := time.Now()
	ca, err := certs.NewCA("users-ca", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("users-next-ca", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	secrets := etcdv1alpha1.TLSSecrets{Peer: "users-peer", Server: "users-server", Client: "users-client"}
	var cluster *etcdv1alpha1.EtcdCluster
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderSecrets, Secrets: &secrets}
		cluster = c
	}, func() []client.Object {
		var out []client.Object
		for kind, name := range map[certs.Kind]string{certs.Peer: secrets.Peer, certs.Server: secrets.Server, certs.Client: secrets.Client} {
			kp, err := certs.Issue(ca, resources.CertificateRequest(cluster, kind), now)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{certs.KeyCert: kp.CertPEM, certs.KeyKey: kp.KeyPEM, certs.KeyCA: ca.CertPEM}})
		}
		return out
	})
	w := &rotationWorld{a: a, loaded: map[string][]string{}}
	a.reconcile(t, 3)
	uids := map[string]types.UID{}
	for _, m := range a.members {
		p := w.pod(t, m)
		if p.Annotations[resources.AnnotationTrustedCAHash] == "" {
			t.Fatalf("pod %s made before the record has none after three reconciles", m)
		}
		uids[m] = p.UID
	}
	a.reconcile(t, 3)
	for _, m := range a.members {
		if w.pod(t, m).UID != uids[m] {
			t.Fatalf("pod %s restarted with no change of CA", m)
		}
	}

	// The server Secret trusts a second CA too: every member restarts, one at a time.
	server := w.secret(t, secrets.Server)
	server.Data[certs.KeyCA] = certs.JoinBundle(ca.CertPEM, other.CertPEM)
	if err := a.k8s.Update(t.Context(), server); err != nil {
		t.Fatal(err)
	}
	restarted := map[string]bool{}
	for i := 0; len(restarted) < 3 || w.down(t) > 0; i++ {
		if i > 100 {
			t.Fatalf("members restarted after 100 reconciles: %v", restarted)
		}
		a.events()
		if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}); err != nil && !strings.Contains(err.Error(), "conflict") {
			t.Fatalf("reconcile: %v", err)
		}
		if down := w.down(t); down > 1 {
			t.Fatalf("%d members down at once", down)
		}
		for _, m := range a.members {
			if p := w.pod(t, m); p == nil || p.UID != uids[m] {
				restarted[m] = true
			}
		}
		// Made again, the pods run as created: the fake client gives them a new UID only if
		// they had one, so each is told apart by its record.
		for _, m := range a.members {
			if p := w.pod(t, m); p != nil && p.UID == uids[m] && p.Annotations[resources.AnnotationTrustedCAHash] == resources.TrustedCAHash(ca.CertPEM, server.Data[certs.KeyCA]) {
				restarted[m] = true
			}
		}
		w.start(t)
	}
}

// down is how many members have no running pod.
func (w *rotationWorld) down(t *testing.T) int {
	t.Helper()
	n := 0
	for _, m := range w.a.members {
		if p := w.pod(t, m); p == nil || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
			n++
		}
	}
	return n
}
