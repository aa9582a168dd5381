package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Keys of the root credentials Secret.
const (
	// RootPasswordKey is the root password etcd has, as far as the operator knows; the agent
	// Jobs authenticate with it.
	RootPasswordKey = "password"
	// RootPendingPasswordKey is the password the operator is setting in etcd: written before
	// the change, so that a change interrupted half-way is never a password the operator has
	// forgotten.
	RootPendingPasswordKey = "pending"
)

// RootCredentialsSecretName is the operator's record of the root password etcd has. The
// user's Secret (spec.auth.rootSecretName) says what the password should be; the two differ
// while a rotation is under way.
func RootCredentialsSecretName(cluster string) string { return cluster + "-root-credentials" }

// RootCredentials is the operator's record: the password etcd has and, during a change, the
// one being set.
func RootCredentials(c *etcdv1alpha1.EtcdCluster, password, pending string) *corev1.Secret {
	data := map[string][]byte{RootPasswordKey: []byte(password)}
	if pending != "" {
		data[RootPendingPasswordKey] = []byte(pending)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: RootCredentialsSecretName(c.Name), Namespace: c.Namespace, Labels: ClusterLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}
