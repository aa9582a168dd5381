package controllers

import (
	"context"
	"errors"
	"fmt"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// rootPasswordKey is the key of the root password in spec.auth.rootSecretName.
const rootPasswordKey = "password"

// access is how the operator reaches a cluster's etcd: TLS material and root credentials.
type access struct {
	tls      *tlsState // nil for a plain-HTTP cluster
	password string    // empty without spec.auth
	// secretVersion identifies the credentials Secret's content, for the client cache.
	secretVersion string
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
	secret, err := r.getSecret(ctx, c.Namespace, c.Spec.Auth.RootSecretName)
	if err != nil {
		return nil, err
	}
	if secret == nil || len(secret.Data[rootPasswordKey]) == 0 {
		return nil, &accessError{reason: etcdv1alpha1.ReasonInvalidSpec, err: fmt.Errorf(
			"spec.auth.rootSecretName: Secret %s with a non-empty %q key is required", c.Spec.Auth.RootSecretName, rootPasswordKey)}
	}
	a.password, a.secretVersion = string(secret.Data[rootPasswordKey]), secret.Name+"@"+secret.ResourceVersion
	return a, nil
}

// config is the etcd client configuration for the given endpoints.
func (a *access) config(endpoints []string) etcd.Config {
	cfg := etcd.Config{Endpoints: endpoints, Fingerprint: a.secretVersion}
	if a.tls != nil {
		cfg.TLS = a.tls.clientConfig
		cfg.Fingerprint += "|" + a.tls.fingerprint
	}
	if a.password != "" {
		cfg.Username, cfg.Password = "root", a.password
	}
	return cfg
}
