package resources

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

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
	// RootPasswordHistoryKey holds the passwords the operator has set in etcd, newest first,
	// each with when (JSON, a list of RootPasswordSet). A snapshot holds the root password in
	// force when it was taken, and so does a cluster restored from it: after a rotation, the
	// operator logs in to such a cluster with a password from here.
	RootPasswordHistoryKey = "history"
)

// RootPasswordHistoryLimit is how many passwords the history keeps. Only a restore of a
// snapshot taken before the oldest one kept was set needs an older one; that cluster reports
// CredentialsRejected, naming the Secret to put the password in, and nothing is lost meanwhile.
// The bound keeps the Secret small and the logins tried against a restored cluster few.
const RootPasswordHistoryLimit = 10

// RootCredentialsSecretName is the operator's record of the root password etcd has. The
// user's Secret (spec.auth.rootSecretName) says what the password should be; the two differ
// while a rotation is under way.
func RootCredentialsSecretName(cluster string) string { return cluster + "-root-credentials" }

// RootRecord is what the operator's record of the root password holds.
type RootRecord struct {
	// Password is the password etcd has, as far as the operator knows; "" while it does not
	// know (a restored cluster not yet reached).
	Password string
	// Pending is the password being set, during a change.
	Pending string
	// History are the passwords the operator has set, newest first, at most
	// RootPasswordHistoryLimit.
	History []RootPasswordSet
}

// RootPasswordSet is one password of the history.
type RootPasswordSet struct {
	Password string `json:"password"`
	// At is when the operator last set it or, for a password etcd already had when the
	// operator first kept a history (one set by an earlier operator version, or by the user),
	// when the operator first found etcd to have it.
	At metav1.Time `json:"at"`
}

// WithPasswordsSet is the record with sets added to its history: a password already there
// keeps the later of its two times, and the oldest beyond RootPasswordHistoryLimit go.
func (rec RootRecord) WithPasswordsSet(sets ...RootPasswordSet) RootRecord {
	latest := map[string]RootPasswordSet{}
	for _, s := range append(slices.Clone(rec.History), sets...) {
		if s.Password == "" {
			continue
		}
		if kept, ok := latest[s.Password]; !ok || kept.At.Before(&s.At) {
			latest[s.Password] = s
		}
	}
	history := make([]RootPasswordSet, 0, len(latest))
	for _, s := range latest {
		history = append(history, s)
	}
	slices.SortFunc(history, func(a, b RootPasswordSet) int {
		return cmp.Or(b.At.Compare(a.At.Time), cmp.Compare(a.Password, b.Password))
	})
	rec.History = history[:min(len(history), RootPasswordHistoryLimit)]
	return rec
}

// WithPasswordSet is the record with password added to its history as set at at.
func (rec RootRecord) WithPasswordSet(password string, at time.Time) RootRecord {
	return rec.WithPasswordsSet(RootPasswordSet{Password: password, At: metav1.NewTime(at.UTC().Truncate(time.Second))})
}

// HasSet says whether the history holds password.
func (rec RootRecord) HasSet(password string) bool {
	return slices.ContainsFunc(rec.History, func(s RootPasswordSet) bool { return s.Password == password })
}

// RootCredentials is the operator's record of the root password as a Secret.
func RootCredentials(c *etcdv1alpha1.EtcdCluster, rec RootRecord) (*corev1.Secret, error) {
	data := map[string][]byte{}
	if rec.Password != "" {
		data[RootPasswordKey] = []byte(rec.Password)
	}
	if rec.Pending != "" {
		data[RootPendingPasswordKey] = []byte(rec.Pending)
	}
	if len(rec.History) > 0 {
		history, err := json.Marshal(rec.History)
		if err != nil {
			return nil, fmt.Errorf("encode the root password history: %w", err)
		}
		data[RootPasswordHistoryKey] = history
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: RootCredentialsSecretName(c.Name), Namespace: c.Namespace, Labels: ClusterLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, nil
}

// ReadRootCredentials is what the operator's record holds; a nil Secret (none yet) holds
// nothing.
func ReadRootCredentials(secret *corev1.Secret) (RootRecord, error) {
	if secret == nil {
		return RootRecord{}, nil
	}
	rec := RootRecord{Password: string(secret.Data[RootPasswordKey]), Pending: string(secret.Data[RootPendingPasswordKey])}
	if history := secret.Data[RootPasswordHistoryKey]; len(history) > 0 {
		// Not json's error: it may quote what it could not read, a password perhaps.
		if json.Unmarshal(history, &rec.History) != nil {
			return RootRecord{}, fmt.Errorf("Secret %s, key %s: not the list of passwords and times the operator writes", secret.Name, RootPasswordHistoryKey)
		}
	}
	return rec, nil
}
