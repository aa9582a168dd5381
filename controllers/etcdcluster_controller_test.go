package controllers_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// envtest has an API server but no kubelet: pods are created but never run, so these tests
// cover everything up to etcd itself — the objects made, their safety properties, and the
// truthfulness of status while no member answers. The real cluster's e2e tests cover the rest.

// restrictedNamespace enforces the restricted Pod Security profile, as users' namespaces may:
// the API server refuses any member pod that does not meet it.
func restrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "etcd-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if err := k8sClient.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newCluster(t *testing.T, name string, mutate ...func(*etcdv1alpha1.EtcdCluster)) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: restrictedNamespace(t)}}
	for _, m := range mutate {
		m(c)
	}
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func membersOf(t *testing.T, c *etcdv1alpha1.EtcdCluster) ([]corev1.Pod, []corev1.PersistentVolumeClaim) {
	t.Helper()
	pods := &corev1.PodList{}
	pvcs := &corev1.PersistentVolumeClaimList{}
	sel := client.MatchingLabels{resources.LabelCluster: c.Name}
	if err := k8sClient.List(t.Context(), pods, client.InNamespace(c.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.List(t.Context(), pvcs, client.InNamespace(c.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	return pods.Items, pvcs.Items
}

func waitForPods(t *testing.T, c *etcdv1alpha1.EtcdCluster, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 10*time.Second, func() error {
		pods, _ = membersOf(t, c)
		if len(pods) != n {
			return fmt.Errorf("%d pods, want %d", len(pods), n)
		}
		return nil
	})
	return pods
}

func TestBootstrapCreatesMembersThatFormOneCluster(t *testing.T) {
	c := newCluster(t, "boot")
	pods := waitForPods(t, c, 3)
	_, pvcs := membersOf(t, c)

	initial := pods[0].Annotations[resources.AnnotationInitialCluster]
	for _, p := range pods {
		if !strings.HasPrefix(p.Name, "boot-") || p.Annotations[resources.AnnotationClusterState] != "new" {
			t.Errorf("pod %s: state %q", p.Name, p.Annotations[resources.AnnotationClusterState])
		}
		if p.Annotations[resources.AnnotationInitialCluster] != initial || !strings.Contains(initial, p.Name+"=http://"+p.Name+".boot-peer.") {
			t.Errorf("pod %s is not in the one shared --initial-cluster %q", p.Name, initial)
		}
		if !slices.Contains(p.Spec.Containers[0].Args, "--initial-cluster-token="+string(c.UID)) {
			t.Errorf("pod %s: the cluster token must be the cluster's UID: %v", p.Name, p.Spec.Containers[0].Args)
		}
		if p.Spec.Containers[0].Image != "registry.test/etcd:v3.6.16" {
			t.Errorf("pod %s image %q", p.Name, p.Spec.Containers[0].Image)
		}
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != c.UID {
			t.Errorf("pod %s is not owned by its cluster", p.Name)
		}
	}
	if len(pvcs) != 3 {
		t.Fatalf("%d claims, want 3", len(pvcs))
	}
	for _, pvc := range pvcs {
		// The default retention keeps data when the EtcdCluster is deleted by mistake.
		if metav1.GetControllerOf(&pvc) != nil {
			t.Errorf("claim %s is owned by the cluster despite whenDeleted: Retain", pvc.Name)
		}
	}

	peer := &corev1.Service{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "boot-peer"}, peer); err != nil {
		t.Fatal(err)
	}
	if peer.Spec.ClusterIP != corev1.ClusterIPNone || !peer.Spec.PublishNotReadyAddresses {
		t.Errorf("peer Service must be headless and publish members before they are ready: %+v", peer.Spec)
	}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "boot-client"}, &corev1.Service{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "boot"}, pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("PDB minAvailable %s, want 2 for three members", pdb.Spec.MinAvailable)
	}

	// Nothing answers (no kubelet here): status must say so, not guess.
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		available := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
		if available == nil || available.Status != metav1.ConditionFalse || available.Reason != etcdv1alpha1.ReasonBootstrapping {
			return fmt.Errorf("Available = %+v, want False/Bootstrapping", available)
		}
		return nil
	})
	if c.Status.ReadyMembers != 0 || c.Status.Leader != "" || c.Status.ClusterID != "" || len(c.Status.Members) != 0 {
		t.Errorf("status reports members it never observed: %+v", c.Status)
	}
	if c.Status.Selector != "etcd.database.dev/cluster=boot" || c.Status.ClientEndpoint != "http://boot-client."+c.Namespace+".svc:2379" {
		t.Errorf("selector %q, endpoint %q", c.Status.Selector, c.Status.ClientEndpoint)
	}
}

// An operator restart, or a deleted pod, in the middle of a bootstrap must finish the same
// bootstrap — same member names, same --initial-cluster — never start a second one.
func TestBootstrapResumesTheSamePlan(t *testing.T) {
	c := newCluster(t, "resume")
	pods := waitForPods(t, c, 3)
	plan := pods[0].Annotations[resources.AnnotationInitialCluster]
	victim := pods[1]
	if err := k8sClient.Delete(t.Context(), &victim, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		for _, p := range waitForPods(t, c, 3) {
			if p.Name == victim.Name && p.UID != victim.UID {
				if p.Annotations[resources.AnnotationInitialCluster] != plan {
					t.Fatalf("recreated with another plan: %q, want %q", p.Annotations[resources.AnnotationInitialCluster], plan)
				}
				return nil
			}
		}
		return fmt.Errorf("pod %s not recreated yet", victim.Name)
	})
}

func TestEphemeralClusterHasNoClaims(t *testing.T) {
	c := newCluster(t, "scratch", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 1; c.Spec.Storage.Ephemeral = true })
	pods := waitForPods(t, c, 1)
	if pods[0].Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("ephemeral member volume: %+v", pods[0].Spec.Volumes[0])
	}
	if _, pvcs := membersOf(t, c); len(pvcs) != 0 {
		t.Errorf("%d claims for an ephemeral cluster", len(pvcs))
	}
}

func TestClaimsAreOwnedWhenTheyShouldDieWithTheCluster(t *testing.T) {
	c := newCluster(t, "owned", func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Size = 1
		c.Spec.Storage.RetentionPolicy.WhenDeleted = etcdv1alpha1.DeletePVC
	})
	waitForPods(t, c, 1)
	_, pvcs := membersOf(t, c)
	if len(pvcs) != 1 || metav1.GetControllerOf(&pvcs[0]) == nil {
		t.Fatalf("claims %v: want one, owned by the cluster", pvcs)
	}
}

func TestPausedClusterIsLeftAlone(t *testing.T) {
	c := newCluster(t, "paused", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = true })
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); p == nil || p.Reason != etcdv1alpha1.ReasonPaused {
			return fmt.Errorf("Progressing = %+v, want reason Paused", p)
		}
		return nil
	})
	if pods, _ := membersOf(t, c); len(pods) != 0 {
		t.Fatalf("a paused cluster got %d pods", len(pods))
	}
}

func TestOperatorTLSIssuesCertificatesAndMountsThem(t *testing.T) {
	c := newCluster(t, "secure", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 1; c.Spec.TLS = &etcdv1alpha1.TLSSpec{} })
	pod := waitForPods(t, c, 1)[0]

	ca := &corev1.Secret{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "secure-ca"}, ca); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Data["tls.crt"])
	for name, host := range map[string]string{
		"secure-peer-tls":   pod.Name + ".secure-peer." + c.Namespace + ".svc",
		"secure-server-tls": "secure-client." + c.Namespace + ".svc",
		"secure-client-tls": "",
	} {
		secret := &corev1.Secret{}
		if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name}, secret); err != nil {
			t.Fatal(err)
		}
		if _, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		block, _ := pem.Decode(secret.Data["tls.crt"])
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s does not chain to the cluster CA for %q: %v", name, host, err)
		}
	}
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--client-cert-auth=true", "--peer-client-cert-auth=true", "--initial-advertise-peer-urls=https://"} {
		if !strings.Contains(args, want) {
			t.Errorf("member args lack %q: %s", want, args)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if len(c.Status.Certificates) != 4 {
			return fmt.Errorf("status.certificates = %+v, want ca, peer, server, client", c.Status.Certificates)
		}
		return nil
	})
	for _, cs := range c.Status.Certificates {
		if cs.NotAfter == nil || cs.NotAfter.Before(&metav1.Time{Time: time.Now().Add(300 * 24 * time.Hour)}) {
			t.Errorf("certificate %s expiry %v", cs.Name, cs.NotAfter)
		}
	}
}

func TestAuthWithoutItsSecretIsReportedAndNothingStarts(t *testing.T) {
	c := newCluster(t, "auth", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "missing"} })
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		if d == nil || d.Reason != etcdv1alpha1.ReasonInvalidSpec || !strings.Contains(d.Message, "Secret missing") {
			return fmt.Errorf("Degraded = %+v", d)
		}
		return nil
	})
	if pods, _ := membersOf(t, c); len(pods) != 0 {
		t.Fatalf("%d pods started without the root credentials", len(pods))
	}
}

func TestIdleReconcileWritesNothing(t *testing.T) {
	c := newCluster(t, "idle", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = true })
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.ObservedGeneration == 0 {
			return fmt.Errorf("not reconciled yet")
		}
		return nil
	})

	// A label change triggers a reconcile without changing what status should say.
	c.Labels = map[string]string{"touched": "yes"}
	if err := k8sClient.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	afterLabel := c.ResourceVersion
	time.Sleep(2 * time.Second)
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if c.ResourceVersion != afterLabel {
		t.Fatalf("the reconciler wrote an unchanged status (resourceVersion %s -> %s)", afterLabel, c.ResourceVersion)
	}
}
