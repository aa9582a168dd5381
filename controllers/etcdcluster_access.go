package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// rootPasswordKey is the key of the root password in spec.auth.rootSecretName.
const rootPasswordKey = "password"

// access is how the operator reaches a cluster's etcd: TLS material and root credentials.
type access struct {
	tls  *tlsState        // nil for a plain-HTTP cluster
	root *rootCredentials // nil without spec.auth
}

// rootCredentials are the root passwords the operator knows for a cluster with spec.auth.
// The user's Secret says what the password should be; etcd keeps the one it was last given
// until the operator changes it. The operator therefore records, in a Secret of its own, the
// password etcd has, and, while changing it, the one being set: it is never locked out by a
// rotation, even one interrupted half-way.
type rootCredentials struct {
	// desired is the password in the user's Secret.
	desired string
	// record is the operator's record (resources.RootCredentials); nil until first written.
	record *corev1.Secret
}

// candidates are the passwords to authenticate with, the likeliest first: the one etcd was
// last given, the one being set when a change was interrupted, then the user's.
func (rc *rootCredentials) candidates() []string {
	var out []string
	if rc.record != nil {
		for _, key := range []string{resources.RootPasswordKey, resources.RootPendingPasswordKey} {
			if pw := string(rc.record.Data[key]); pw != "" && !slices.Contains(out, pw) {
				out = append(out, pw)
			}
		}
	}
	if !slices.Contains(out, rc.desired) {
		out = append(out, rc.desired)
	}
	return out
}

// accessError is a problem with certificates or credentials, reported with its own reason.
type accessError struct {
	reason string
	err    error
}

func (e *accessError) Error() string { return e.err.Error() }
func (e *accessError) Unwrap() error { return e.err }

func accessErrorReason(err error) string {
	var ae *accessError
	if errors.As(err, &ae) {
		return ae.reason
	}
	return etcdv1alpha1.ReasonInvalidSpec
}

// etcdAccess issues or loads the certificates and reads the root credentials.
func (r *EtcdClusterReconciler) etcdAccess(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*access, error) {
	a := &access{}
	tlsState, err := r.ensureCertificates(ctx, c, r.now())
	if err != nil {
		return nil, &accessError{reason: etcdv1alpha1.ReasonCertificateError, err: err}
	}
	a.tls = tlsState
	if c.Spec.Auth == nil {
		return a, nil
	}
	secret, err := getSecret(ctx, r.APIReader, c.Namespace, c.Spec.Auth.RootSecretName)
	if err != nil {
		return nil, err
	}
	if secret == nil || len(secret.Data[rootPasswordKey]) == 0 {
		return nil, &accessError{reason: etcdv1alpha1.ReasonInvalidSpec, err: fmt.Errorf(
			"spec.auth.rootSecretName: Secret %s with a non-empty %q key is required", c.Spec.Auth.RootSecretName, rootPasswordKey)}
	}
	record, err := getSecret(ctx, r.Client, c.Namespace, resources.RootCredentialsSecretName(c.Name))
	if err != nil {
		return nil, err
	}
	a.root = &rootCredentials{desired: string(secret.Data[rootPasswordKey]), record: record}
	return a, nil
}

// config is the etcd client configuration for the given endpoints, authenticating as root
// with password when the cluster has spec.auth.
func (a *access) config(endpoints []string, password string) etcd.Config {
	cfg := etcd.Config{Endpoints: endpoints}
	if a.tls != nil {
		cfg.TLS = a.tls.clientConfig
		cfg.Fingerprint = a.tls.fingerprint
	}
	if a.root != nil {
		cfg.Username, cfg.Password = "root", password
	}
	return cfg
}

// connect returns a client of the cluster's etcd and the root password etcd accepted. More
// than one password is tried only while a change of it is under way or was interrupted.
func (r *EtcdClusterReconciler) connect(c *etcdv1alpha1.EtcdCluster, a *access, endpoints []string) (etcd.Client, string, error) {
	key := client.ObjectKeyFromObject(c).String()
	if a.root == nil {
		cl, err := r.Etcd.Get(key, a.config(endpoints, ""))
		return cl, "", err
	}
	for _, password := range a.root.candidates() {
		cl, err := r.Etcd.Get(key, a.config(endpoints, password))
		if !errors.Is(err, etcd.ErrAuthFailed) {
			return cl, password, err
		}
	}
	return nil, "", &accessError{reason: etcdv1alpha1.ReasonCredentialsRejected, err: fmt.Errorf(
		"etcd refuses the root password of Secret %s and the one the operator last set (Secret %s): "+
			"if it was changed outside the operator, put the password etcd has in Secret %s",
		c.Spec.Auth.RootSecretName, resources.RootCredentialsSecretName(c.Name), c.Spec.Auth.RootSecretName)}
}

// recordRootPassword keeps the operator's record of the root password true: once etcd has
// answered whether authentication is on, it is the password etcd accepted, or, before
// authentication is on (any password is accepted then), the user's. The agent Jobs read it.
func (r *EtcdClusterReconciler) recordRootPassword(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	if !obs.authAnswered() {
		return nil
	}
	root := obs.access.root
	password := root.desired
	if obs.authEnabled {
		password = obs.rootPassword
	}
	record, err := r.writeRootCredentials(ctx, c, root.record, password, "")
	if err != nil {
		return err
	}
	root.record = record // a step of this reconcile writes it again
	return nil
}

// setRootPassword gives etcd's root user the user's password and, with enable, turns
// authentication on. The password being set is recorded first, so that the operator can
// authenticate with whichever of the two etcd has if it stops half-way.
func (r *EtcdClusterReconciler) setRootPassword(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, enable bool) error {
	root := obs.access.root
	if c.Spec.TLS == nil {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, etcdv1alpha1.ReasonAuthWithoutTLS, "Configure",
			"spec.auth without spec.tls: the root password crosses the network in clear text whenever a client authenticates; set spec.tls")
	}
	record, err := r.writeRootCredentials(ctx, c, root.record, obs.rootPassword, root.desired)
	if err != nil {
		return err
	}
	// gofail: var rootPasswordPendingRecorded struct{}
	if err := obs.client.SetRootPassword(ctx, root.desired); err != nil {
		return err
	}
	if enable {
		if err := obs.client.EnableAuth(ctx); err != nil {
			return err
		}
	}
	// The client's token is void once the password has changed: connect afresh next time.
	r.Etcd.Forget(client.ObjectKeyFromObject(c).String())
	_, err = r.writeRootCredentials(ctx, c, record, root.desired, "")
	return err
}

// writeRootCredentials writes the operator's record of the root password when it differs from
// current, under current's resourceVersion: a record read from a stale cache is not written
// over a newer one. It returns the record as written.
func (r *EtcdClusterReconciler) writeRootCredentials(ctx context.Context, c *etcdv1alpha1.EtcdCluster, current *corev1.Secret, password, pending string) (*corev1.Secret, error) {
	desired := resources.RootCredentials(c, password, pending)
	if current == nil {
		// Not createOwned: a record the cache does not show yet must fail the create, not be
		// taken for written.
		if err := ctrl.SetControllerReference(c, desired, r.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("record the root password in Secret %s: %w", desired.Name, err)
		}
		return desired, nil
	}
	if maps.EqualFunc(current.Data, desired.Data, bytes.Equal) {
		return current, nil
	}
	updated := current.DeepCopy()
	updated.Data = desired.Data
	if err := r.Update(ctx, updated); err != nil {
		return nil, fmt.Errorf("record the root password in Secret %s: %w", updated.Name, err)
	}
	return updated, nil
}
