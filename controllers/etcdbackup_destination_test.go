package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A destination the agent cannot use is refused before any Job is made, with a message that
// names what to fix. Before, the Job was made: it sat in CreateContainerConfigError for a
// missing key, or wrote the snapshot onto a member's data claim.
func TestBackupDestinationIsCheckedBeforeAnyJob(t *testing.T) {
	available := formedCluster(nil)
	memberClaim := resources.MemberPVC(available, resources.MemberSpec{Name: "c-abcde"})
	s3 := func(creds, ca string) etcdv1alpha1.StorageLocation {
		return etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", Endpoint: "https://s3", CredentialsSecretName: creds, CASecretName: ca}}
	}
	identity := func(serviceAccount string) etcdv1alpha1.StorageLocation {
		return etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", Endpoint: "https://s3", ServiceAccountName: serviceAccount}}
	}
	secret := func(name string, keys ...string) *corev1.Secret {
		data := map[string][]byte{}
		for _, k := range keys {
			data[k] = []byte("x")
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
	}
	for _, tc := range []struct {
		name        string
		dest        etcdv1alpha1.StorageLocation
		wantReason  string
		wantMessage string
	}{
		{"credentials without the secret key", s3("creds-half", ""), etcdv1alpha1.ReasonSecretKeysMissing, "Secret creds-half has no AWS_SECRET_ACCESS_KEY"},
		{"storage CA without its certificate", s3("creds", "ca-empty"), etcdv1alpha1.ReasonSecretKeysMissing, "Secret ca-empty has no ca.crt"},
		{"credentials Secret missing", s3("nope", ""), etcdv1alpha1.ReasonSecretNotFound, "Secret nope does not exist"},
		{"a member's data claim", etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: memberClaim.Name}}, etcdv1alpha1.ReasonInvalidDestination, "holds the data of member c-abcde of EtcdCluster c"},
		{"everything in place", s3("creds", "ca"), etcdv1alpha1.ReasonReady, ""},
		{"the pod's identity, its ServiceAccount missing", identity("nobody"), etcdv1alpha1.ReasonServiceAccountNotFound, "ServiceAccount nobody does not exist in namespace ns"},
		{"the pod's identity, its ServiceAccount there", identity("etcd-backups"), etcdv1alpha1.ReasonReady, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"},
				Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c", Destination: tc.dest}}
			k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(available, memberClaim,
				secret("creds-half", "AWS_ACCESS_KEY_ID"), secret("creds", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
				secret("ca-empty"), secret("ca", "ca.crt"),
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "etcd-backups", Namespace: "ns"}}).Build()
			r := &EtcdBackupReconciler{Client: cacheView(k8s), APIReader: k8s, AgentImage: "registry.test/agent"}
			_, ready := r.checkReady(t.Context(), b)
			cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionReady)
			if cond == nil || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantMessage) || ready != (tc.wantReason == etcdv1alpha1.ReasonReady) {
				t.Fatalf("ready %v, condition %+v; want reason %s with %q", ready, cond, tc.wantReason, tc.wantMessage)
			}
		})
	}
}
