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
// rotation, even one interrupted half-way. It also keeps there the passwords it has set before:
// a cluster restored from a snapshot has the password in force when the snapshot was taken.
type rootCredentials struct {
	// desired is the password in the user's Secret.
	desired string
	// record is the operator's record (resources.RootCredentials) as read or last written; nil
	// until first written. known is what it holds.
	record *corev1.Secret
	known  resources.RootRecord
}

// loginPasswords are the passwords to log in to etcd as root with, the likeliest first: the one
// etcd was last given, the one being set when a change was interrupted, the user's, then those
// the operator set before, newest first. etcd has one of the last only once its data was
// restored from a snapshot taken before a rotation, and the newer the snapshot, the likelier
// it is to be a recent one. This is the one place that decides which passwords are tried.
func loginPasswords(known resources.RootRecord, desired string) []string {
	var out []string
	add := func(password string) {
		if password != "" && !slices.Contains(out, password) {
			out = append(out, password)
		}
	}
	add(known.Password)
	add(known.Pending)
	add(desired)
	for _, set := range known.History {
		add(set.Password)
	}
	return out
}

// setBefore is the entry of the history for password, when password is one the operator set
// before the one it last set: etcd's data was restored from a snapshot taken before a rotation.
func (rc *rootCredentials) setBefore(password string) (resources.RootPasswordSet, bool) {
	if password == rc.known.Password || password == rc.known.Pending || password == rc.desired {
		return resources.RootPasswordSet{}, false
	}
	i := slices.IndexFunc(rc.known.History, func(s resources.RootPasswordSet) bool { return s.Password == password })
	if i < 0 {
		return resources.RootPasswordSet{}, false
	}
	return rc.known.History[i], true
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
	tlsState, err := r.ensureCertificates(ctx, c, r.now())
	if err != nil {
		return nil, &accessError{reason: etcdv1alpha1.ReasonCertificateError, err: err}
	}
	return r.accessWith(ctx, c, tlsState)
}

// readAccess loads the certificates and reads the root credentials, and writes nothing: for
// a reader beside the reconciler, which alone issues and renews.
func (r *EtcdClusterReconciler) readAccess(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*access, error) {
	if c.Spec.TLS == nil {
		return r.accessWith(ctx, c, nil)
	}
	tlsState, err := r.loadTLSState(ctx, c)
	if err != nil {
		return nil, &accessError{reason: etcdv1alpha1.ReasonCertificateError, err: err}
	}
	return r.accessWith(ctx, c, tlsState)
}

func (r *EtcdClusterReconciler) accessWith(ctx context.Context, c *etcdv1alpha1.EtcdCluster, tlsState *tlsState) (*access, error) {
	a := &access{tls: tlsState}
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
	known, err := resources.ReadRootCredentials(record)
	if err != nil {
		return nil, fmt.Errorf("the operator's record of the root password is unreadable: %w; only the operator writes it: remove that key to start its history afresh", err)
	}
	a.root = &rootCredentials{desired: string(secret.Data[rootPasswordKey]), record: record, known: known}
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

// certificateConfig is the configuration of a client that presents the operator's client
// certificate and logs in with no password, or ok false for a cluster without TLS. etcd takes
// the certificate's common name, root, for the user: unlike a password login, whose token
// etcd issues through raft, it needs no quorum.
func (a *access) certificateConfig(endpoints []string) (etcd.Config, bool) {
	if a.tls == nil || a.tls.clientConfig == nil || len(a.tls.clientConfig.Certificates) == 0 {
		return etcd.Config{}, false
	}
	return etcd.Config{Endpoints: endpoints, TLS: a.tls.clientConfig, Fingerprint: a.tls.fingerprint}, true
}

// connect returns a client of the cluster's etcd and the root password etcd accepted. More
// than one password is tried only while a change of it is under way or was interrupted, or
// once the cluster's data was restored from a snapshot taken before a rotation.
func (r *EtcdClusterReconciler) connect(c *etcdv1alpha1.EtcdCluster, a *access, endpoints []string) (etcd.Client, string, error) {
	key := client.ObjectKeyFromObject(c).String()
	return a.login(c, endpoints, func(cfg etcd.Config) (etcd.Client, error) { return r.Etcd.Get(key, cfg) })
}

// login connects with dial as root with the passwords loginPasswords gives, in turn, or
// without credentials for a cluster without spec.auth.
func (a *access) login(c *etcdv1alpha1.EtcdCluster, endpoints []string, dial func(etcd.Config) (etcd.Client, error)) (etcd.Client, string, error) {
	if a.root == nil {
		cl, err := dial(a.config(endpoints, ""))
		return cl, "", err
	}
	passwords := loginPasswords(a.root.known, a.root.desired)
	for _, password := range passwords {
		cl, err := dial(a.config(endpoints, password))
		if !errors.Is(err, etcd.ErrAuthFailed) {
			return cl, password, err
		}
	}
	tried := "and the operator has recorded no other password for this cluster"
	if others := len(passwords) - 1; others > 0 {
		tried = fmt.Sprintf("and each of the %d others the operator has set on this cluster and recorded", others)
	}
	return nil, "", &accessError{reason: etcdv1alpha1.ReasonCredentialsRejected, err: fmt.Errorf(
		"etcd refuses the root password of Secret %s %s (Secret %s): the cluster's data comes from a snapshot older than "+
			"every password recorded, or the password was changed outside the operator. Put the password etcd has in Secret %s",
		c.Spec.Auth.RootSecretName, tried, resources.RootCredentialsSecretName(c.Name), c.Spec.Auth.RootSecretName)}
}

// recordRootPassword keeps the operator's record of the root password true: once etcd has
// answered whether authentication is on, it is the password etcd accepted, or, before
// authentication is on (any password is accepted then), the user's. The agent Jobs read it.
// A password etcd accepts that the history lacks joins it: a change completed by etcd but not
// yet recorded, or one etcd had before the operator kept a history.
func (r *EtcdClusterReconciler) recordRootPassword(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	if !obs.authAnswered() {
		return nil
	}
	root := obs.access.root
	rec := root.known
	rec.Password, rec.Pending = root.desired, ""
	if obs.authEnabled {
		rec.Password = obs.rootPassword
		if !rec.HasSet(obs.rootPassword) {
			rec = rec.WithPasswordSet(obs.rootPassword, r.now())
		}
	}
	return r.writeRootCredentials(ctx, c, root, rec)
}

// setRootPassword gives etcd's root user the user's password and, with enable, turns
// authentication on. The password being set is recorded first, so that the operator can
// authenticate with whichever of the two etcd has if it stops half-way; once set, it joins the
// history.
func (r *EtcdClusterReconciler) setRootPassword(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, enable bool) error {
	root := obs.access.root
	if c.Spec.TLS == nil {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, etcdv1alpha1.ReasonAuthWithoutTLS, "Configure",
			"spec.auth without spec.tls: the root password crosses the network in clear text whenever a client authenticates; set spec.tls")
	}
	rec := root.known
	rec.Password, rec.Pending = obs.rootPassword, root.desired
	if err := r.writeRootCredentials(ctx, c, root, rec); err != nil {
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
	rec.Password, rec.Pending = root.desired, ""
	return r.writeRootCredentials(ctx, c, root, rec.WithPasswordSet(root.desired, r.now()))
}

// writeRootCredentials writes rec as the operator's record of the root password when it differs
// from the record root holds, and keeps root up to date for the steps that follow.
func (r *EtcdClusterReconciler) writeRootCredentials(ctx context.Context, c *etcdv1alpha1.EtcdCluster, root *rootCredentials, rec resources.RootRecord) error {
	written, err := writeRootRecord(ctx, r.Client, c, root.record, rec)
	if err != nil {
		return err
	}
	root.record, root.known = written, rec
	return nil
}

// writeRootRecord writes rec as the cluster's record of the root password when it differs from
// current, under current's resourceVersion: a record read from a stale cache is not written over
// a newer one. It returns the record as written.
func writeRootRecord(ctx context.Context, cl client.Client, c *etcdv1alpha1.EtcdCluster, current *corev1.Secret, rec resources.RootRecord) (*corev1.Secret, error) {
	desired, err := resources.RootCredentials(c, rec)
	if err != nil {
		return nil, err
	}
	if current == nil {
		// Not createOwned: a record the cache does not show yet must fail the create, not be
		// taken for written.
		if err := ctrl.SetControllerReference(c, desired, cl.Scheme()); err != nil {
			return nil, err
		}
		if err := cl.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("record the root password in Secret %s: %w", desired.Name, err)
		}
		return desired, nil
	}
	if maps.EqualFunc(current.Data, desired.Data, bytes.Equal) {
		return current, nil
	}
	updated := current.DeepCopy()
	updated.Data = desired.Data
	if err := cl.Update(ctx, updated); err != nil {
		return nil, fmt.Errorf("record the root password in Secret %s: %w", updated.Name, err)
	}
	return updated, nil
}

// KeyspacesAt reads, live from etcd, the keyspace digest at revision of every member etcd
// lists, by name: how a restore proves that its members serve one and the same restored store.
// It dials a client of its own, closed on return, rather than share the reconciler's cached
// one, which a change of members replaces.
func (r *EtcdClusterReconciler) KeyspacesAt(ctx context.Context, c *etcdv1alpha1.EtcdCluster, revision int64) (map[string]etcd.KeyspaceDigest, error) {
	a, err := r.readAccess(ctx, c)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, m := range c.Status.Members {
		endpoints = append(endpoints, resources.ClientURL(c, m.Name))
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("EtcdCluster %s reports no members yet", c.Name)
	}
	cl, _, err := a.login(c, endpoints, r.Etcd.Dial)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cl.Close() }()
	_, members, err := cl.Members(ctx)
	if err != nil {
		return nil, err
	}
	digests := map[string]etcd.KeyspaceDigest{}
	for _, m := range members {
		name := memberName(c, m)
		if !m.Started() || name == "" {
			return nil, fmt.Errorf("member %s has not started", name)
		}
		d, err := cl.KeyspaceAt(ctx, m.ClientURLs[0], revision)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", name, err)
		}
		digests[name] = d
	}
	return digests, nil
}
