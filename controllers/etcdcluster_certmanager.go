package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// With tls.provider CertManager, cert-manager issues and renews the certificates; the operator
// makes the Certificates, waits until cert-manager has issued every one, then records the CA
// that signed them in a trust bundle Secret of its own, the only CA members, the operator and
// its Jobs trust. It never handles a private key but for reading its own client key.
//
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificaterequests,verbs=get;list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=patch

// certManagerMissing is the message of a cluster asking for cert-manager where it is not served.
const certManagerMissing = "tls.provider is CertManager, but the API server did not serve cert-manager's Certificates " +
	"(cert-manager.io/v1) when the operator started: install cert-manager (https://cert-manager.io/docs/installation/), " +
	"then restart the operator, which looks for it when it starts; nothing is created until then"

// certManagerWait is why a cluster of provider CertManager cannot start yet: cert-manager is
// not installed, or has not issued every certificate. Nothing is created until it has.
type certManagerWait struct {
	reason  string
	message string
	// failed: cert-manager reported a failure (a request refused, an issuer not found), not an
	// issuance still under way.
	failed bool
}

func (w *certManagerWait) Error() string { return w.message }

// tlsProblem is what a running cluster's certificates need from the user, reported as Degraded.
type tlsProblem struct {
	reason, message string
}

// ensureCertManagerTLS makes the cluster's Certificates, creates the trust bundle once
// cert-manager has issued them all, and returns the operator's client configuration.
func (r *EtcdClusterReconciler) ensureCertManagerTLS(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*tlsState, error) {
	if !r.CertManager {
		return nil, &certManagerWait{reason: etcdv1alpha1.ReasonCertManagerNotInstalled, message: certManagerMissing, failed: true}
	}
	// Before the Certificates are brought to the spec: a new issuer is taken by a rotation,
	// which keeps the old one on them until every member trusts both CAs.
	if err := r.beginIssuerChange(ctx, c); err != nil {
		return nil, err
	}
	if err := r.ensureCAProbes(ctx, c); err != nil {
		return nil, err
	}
	var waiting []string
	failed := false
	for _, ic := range resources.CertManagerCertificates(c) {
		current, err := r.ensureCertificate(ctx, c, ic)
		if err != nil {
			return nil, err
		}
		var request *unstructured.Unstructured
		if !certificateSettled(current) {
			if request, err = r.latestRequest(ctx, current); err != nil {
				return nil, err
			}
		}
		if ready, message, fail := certificateReadiness(current, request); !ready || fail {
			waiting, failed = append(waiting, message), failed || fail
		}
	}
	// Read from the API server: the one just created may not be in the cache yet, and another
	// look must not make it twice from certificates that have changed since.
	bundle, err := getSecret(ctx, r.APIReader, c.Namespace, resources.TrustBundleSecretName(c.Name))
	if err != nil {
		return nil, err
	}
	if bundle == nil {
		if len(waiting) > 0 {
			return nil, &certManagerWait{reason: etcdv1alpha1.ReasonCertificatesNotReady, failed: failed,
				message: "members start once cert-manager has issued every certificate: " + strings.Join(waiting, "; ")}
		}
		if bundle, err = r.createTrustBundle(ctx, c); err != nil {
			return nil, err
		}
	}
	state, issued, err := r.readCertManagerTLS(ctx, c, bundle)
	if err != nil {
		return nil, err
	}
	if err := r.ownIssuedSecrets(ctx, c, issued); err != nil {
		return nil, err
	}
	if state.problem == nil && failed {
		state.problem = &tlsProblem{reason: etcdv1alpha1.ReasonCertificatesNotReady,
			message: "cert-manager cannot issue or renew a certificate; members keep the ones they have: " + strings.Join(waiting, "; ")}
	}
	return state, nil
}

// ensureCertificate creates the Certificate, or brings back to what the spec asks for the
// fields the operator sets, and returns it as it is.
func (r *EtcdClusterReconciler) ensureCertificate(ctx context.Context, c *etcdv1alpha1.EtcdCluster, ic resources.IssuedCertificate) (*unstructured.Unstructured, error) {
	desired := resources.Certificate(c, ic)
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(resources.CertificateGVK)
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), current)
	switch {
	case client.IgnoreNotFound(err) != nil:
		return nil, fmt.Errorf("get Certificate %s: %w", ic.Name, err)
	case err != nil:
		if err := r.createOwned(ctx, c, desired); err != nil {
			return nil, err
		}
		postEvent(r.Recorder, c, corev1.EventTypeNormal, "CertificateCreated", "IssueCertificate",
			"asked cert-manager for the %s certificate: Certificate %s, Secret %s", ic.Kind, ic.Name, ic.Name)
		return desired, nil
	case !metav1.IsControlledBy(current, c):
		return nil, fmt.Errorf("the Certificate %s exists and is not this cluster's: delete it, or name the cluster otherwise", ic.Name)
	}
	if !syncCertificateSpec(current, desired) {
		return current, nil
	}
	if err := r.Update(ctx, current); err != nil {
		return nil, fmt.Errorf("update Certificate %s: %w", ic.Name, err)
	}
	postEvent(r.Recorder, c, corev1.EventTypeNormal, "CertificateUpdated", "IssueCertificate",
		"changed Certificate %s to what spec.tls asks for; cert-manager issues it anew", ic.Name)
	return current, nil
}

// certificateSpecFields are the fields of a Certificate's spec that the operator sets, and
// puts back when they differ; others (a user's additions) are left alone.
var certificateSpecFields = []string{"secretName", "commonName", "dnsNames", "ipAddresses", "usages",
	"duration", "renewBefore", "privateKey", "issuerRef", "secretTemplate"}

// syncCertificateSpec sets current's operator-set fields to desired's, and says whether any
// changed.
func syncCertificateSpec(current, desired *unstructured.Unstructured) bool {
	want, _, _ := unstructured.NestedMap(desired.Object, "spec")
	have, _, _ := unstructured.NestedMap(current.Object, "spec")
	if have == nil {
		have = map[string]any{}
	}
	changed := false
	for _, field := range certificateSpecFields {
		w, wanted := want[field]
		h, has := have[field]
		switch {
		case wanted && (!has || !equality.Semantic.DeepEqual(h, w)):
			have[field], changed = w, true
		case !wanted && has:
			delete(have, field)
			changed = true
		}
	}
	if changed {
		_ = unstructured.SetNestedMap(current.Object, have, "spec")
	}
	return changed
}

// certificateCondition is one of a cert-manager object's status conditions, nil when absent.
type certificateCondition struct {
	status, reason, message string
	observedGeneration      int64
}

func conditionOf(obj *unstructured.Unstructured, condType string) *certificateCondition {
	if obj == nil {
		return nil
	}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok || m["type"] != condType {
			continue
		}
		cond := &certificateCondition{}
		cond.status, _ = m["status"].(string)
		cond.reason, _ = m["reason"].(string)
		cond.message, _ = m["message"].(string)
		cond.observedGeneration, _ = m["observedGeneration"].(int64)
		return cond
	}
	return nil
}

// certificateSettled: cert-manager has issued what the Certificate asks for and is issuing
// nothing now, so its requests need no look.
func certificateSettled(cert *unstructured.Unstructured) bool {
	ready := conditionOf(cert, "Ready")
	return ready != nil && ready.status == "True" && ready.observedGeneration >= cert.GetGeneration() &&
		conditionOf(cert, "Issuing") == nil
}

// certificateReadiness says whether the Certificate is Ready for its current spec, whether
// cert-manager reports a failure issuing it (on the Certificate, or on request, its latest
// CertificateRequest: an issuer not found, a request denied), and, when either, what
// cert-manager says, in its own words.
func certificateReadiness(cert, request *unstructured.Unstructured) (ready bool, message string, failed bool) {
	readyCond := conditionOf(cert, "Ready")
	ready = readyCond != nil && readyCond.status == "True" && readyCond.observedGeneration >= cert.GetGeneration()
	var says []string
	switch {
	case readyCond == nil:
		says = append(says, "not issued yet")
	case readyCond.observedGeneration < cert.GetGeneration():
		says = append(says, "cert-manager has not looked at its changed spec yet")
	case !ready:
		says = append(says, fmt.Sprintf("Ready %s, %s: %s", readyCond.status, readyCond.reason, readyCond.message))
	}
	if issuing := conditionOf(cert, "Issuing"); issuing != nil && issuing.status == "False" {
		failed = true
		says = append(says, fmt.Sprintf("Issuing False, %s: %s", issuing.reason, issuing.message))
	}
	if request != nil {
		for _, condType := range []string{"Denied", "InvalidRequest"} {
			if cond := conditionOf(request, condType); cond != nil && cond.status == "True" {
				failed = true
				says = append(says, fmt.Sprintf("CertificateRequest %s %s, %s: %s", request.GetName(), condType, cond.reason, cond.message))
			}
		}
		// A request an issuer can sign is Ready at once; one that is not says why (Pending:
		// an issuer not found or not ready; Failed: the issuer refused).
		if cond := conditionOf(request, "Ready"); cond != nil && cond.status == "False" {
			failed = true
			says = append(says, fmt.Sprintf("CertificateRequest %s Ready False, %s: %s", request.GetName(), cond.reason, cond.message))
		}
	}
	if ready && !failed {
		return true, "", false
	}
	return ready, fmt.Sprintf("Certificate %s: %s", cert.GetName(), strings.Join(says, "; ")), failed
}

// latestRequest is the CertificateRequest of the Certificate's newest issuance, or nil.
// cert-manager labels each with its Certificate and annotates it with the revision it issues.
func (r *EtcdClusterReconciler) latestRequest(ctx context.Context, cert *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(resources.CertificateRequestGVK.GroupVersion().WithKind("CertificateRequestList"))
	if err := r.APIReader.List(ctx, list, client.InNamespace(cert.GetNamespace()),
		client.MatchingLabels{"cert-manager.io/certificate-name": cert.GetName()}); err != nil {
		return nil, fmt.Errorf("list the CertificateRequests of Certificate %s: %w", cert.GetName(), err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	revision := func(o unstructured.Unstructured) int {
		n, _ := strconv.Atoi(o.GetAnnotations()["cert-manager.io/certificate-revision"])
		return n
	}
	latest := slices.MaxFunc(list.Items, func(a, b unstructured.Unstructured) int {
		return cmp.Or(cmp.Compare(revision(a), revision(b)), a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time))
	})
	return &latest, nil
}

// createTrustBundle records, once, the CA that signed the first certificates cert-manager
// issued: the root of the chain in the ca.crt it wrote beside them, which every one of them
// must chain to. From then on the bundle changes only by a rotation, never with what the
// issuer writes: cert-manager's ca.crt follows the issuer's CA, and a CA replaced in place would
// otherwise be trusted by members without anyone choosing to.
func (r *EtcdClusterReconciler) createTrustBundle(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*corev1.Secret, error) {
	var roots []byte
	var from string
	for _, ic := range resources.CertManagerCertificates(c) {
		secret, err := getSecret(ctx, r.APIReader, c.Namespace, ic.Name)
		if err != nil {
			return nil, err
		}
		if secret == nil {
			return nil, fmt.Errorf("the Certificate %s is Ready but its Secret is not found", ic.Name)
		}
		if roots == nil {
			if roots, err = certs.TrustRoots(secret.Data[certs.KeyCA]); err != nil {
				return nil, fmt.Errorf("Secret %s: %s: %w: the issuer does not give the CA that signs its certificates; use a CA or self-signed issuer", ic.Name, certs.KeyCA, err)
			}
			from = ic.Name
		}
		if err := certs.VerifyChain(secret.Data[certs.KeyCert], roots, r.now()); err != nil {
			return nil, fmt.Errorf("the certificate in Secret %s does not chain to the CA in the %s of Secret %s: %w", ic.Name, certs.KeyCA, from, err)
		}
	}
	bundle := resources.TrustBundle(c, roots)
	if err := r.createOwned(ctx, c, bundle); err != nil {
		return nil, err
	}
	postEvent(r.Recorder, c, corev1.EventTypeNormal, "TrustBundleCreated", "IssueCertificate",
		"members, the operator and its Jobs trust the CA that signed the first certificates (from the %s of Secret %s), kept in Secret %s",
		certs.KeyCA, from, bundle.Name)
	return bundle, nil
}

// loadCertManagerTLSState reads the certificates cert-manager wrote and the trust bundle, and
// writes nothing. bundle is the trust bundle when the caller has it, or nil to read it.
func (r *EtcdClusterReconciler) loadCertManagerTLSState(ctx context.Context, c *etcdv1alpha1.EtcdCluster, bundle *corev1.Secret) (*tlsState, error) {
	state, _, err := r.readCertManagerTLS(ctx, c, bundle)
	return state, err
}

// readCertManagerTLS is loadCertManagerTLSState, which also returns the Secrets cert-manager
// wrote, as read.
func (r *EtcdClusterReconciler) readCertManagerTLS(ctx context.Context, c *etcdv1alpha1.EtcdCluster, bundle *corev1.Secret) (*tlsState, []*corev1.Secret, error) {
	bundleName := resources.TrustBundleSecretName(c.Name)
	if bundle == nil {
		var err error
		if bundle, err = getSecret(ctx, r.Client, c.Namespace, bundleName); err != nil {
			return nil, nil, err
		}
		if bundle == nil {
			return nil, nil, fmt.Errorf("trust bundle Secret %s not found: it is made once cert-manager has issued every certificate", bundleName)
		}
	}
	trust := bundle.Data[certs.KeyCA]
	caNotAfter, err := certs.EarliestNotAfter(trust)
	if err != nil {
		return nil, nil, fmt.Errorf("trust bundle Secret %s: %s: %w", bundleName, certs.KeyCA, err)
	}
	state := &tlsState{certificates: []etcdv1alpha1.CertificateStatus{
		{Name: string(certs.CA), SecretName: bundleName, NotAfter: &metav1.Time{Time: caNotAfter}}}}
	var untrusted []string
	var issued []*corev1.Secret
	for _, ic := range resources.CertManagerCertificates(c) {
		secret, err := getSecret(ctx, r.APIReader, c.Namespace, ic.Name)
		if err != nil {
			return nil, nil, err
		}
		if secret == nil {
			return nil, nil, fmt.Errorf("TLS Secret %s (%s certificate) not found; cert-manager writes it for Certificate %s", ic.Name, ic.Kind, ic.Name)
		}
		notAfter, err := certs.NotAfter(secret.Data[certs.KeyCert])
		if err != nil {
			return nil, nil, fmt.Errorf("TLS Secret %s: %s: %w", ic.Name, certs.KeyCert, err)
		}
		issued = append(issued, secret)
		state.certificates = append(state.certificates, etcdv1alpha1.CertificateStatus{Name: string(ic.Kind), SecretName: ic.Name, NotAfter: &metav1.Time{Time: notAfter}})
		if err := certs.VerifyChain(secret.Data[certs.KeyCert], trust, r.now()); err != nil {
			untrusted = append(untrusted, ic.Name)
		}
		if ic.Kind != certs.Client {
			continue
		}
		// The operator verifies members against the bundle, never the ca.crt beside its key.
		withBundle := &corev1.Secret{Data: map[string][]byte{
			certs.KeyCert: secret.Data[certs.KeyCert], certs.KeyKey: secret.Data[certs.KeyKey], certs.KeyCA: trust}}
		if state.clientConfig, err = clientTLSConfig(withBundle); err != nil {
			return nil, nil, fmt.Errorf("TLS Secret %s: %w", ic.Name, err)
		}
		// A renewed client certificate, or a changed bundle, makes a new etcd client.
		state.fingerprint = ic.Name + "@" + secret.ResourceVersion + "," + bundleName + "@" + bundle.ResourceVersion
	}
	if len(untrusted) > 0 {
		ref := c.Spec.TLS.CertManager.IssuerRef
		state.problem = &tlsProblem{reason: etcdv1alpha1.ReasonUntrustedIssuer, message: fmt.Sprintf(
			"Secrets %s hold certificates that do not chain to the CA members trust (Secret %s): the CA of %s %s was replaced in place, "+
				"and members refuse connections made with these certificates once they pick them up. Give %s back the CA in Secret %s "+
				"and renew the Certificates (cmctl renew), or restore a backup into a new EtcdCluster with the issuer you want",
			strings.Join(untrusted, ", "), bundleName, ref.Kind, ref.Name, ref.Name, bundleName)}
	}
	return state, issued, nil
}

// ownIssuedSecrets makes the cluster an owner of the Secrets cert-manager wrote, so that they
// and their private keys go with the cluster: cert-manager leaves a Secret behind when its
// Certificate is deleted (unless its --enable-certificate-owner-ref is set). Not as controller,
// which cert-manager's own reference may be; cert-manager checks only its own.
func (r *EtcdClusterReconciler) ownIssuedSecrets(ctx context.Context, c *etcdv1alpha1.EtcdCluster, issued []*corev1.Secret) error {
	for _, secret := range issued {
		if slices.ContainsFunc(secret.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == c.UID }) {
			continue
		}
		owned := secret.DeepCopy()
		if err := controllerutil.SetOwnerReference(c, owned, r.Scheme()); err != nil {
			return err
		}
		// A strategic merge adds the reference to the list, keyed by UID, leaving cert-manager's.
		if err := r.Patch(ctx, owned, client.StrategicMergeFrom(secret)); err != nil {
			return fmt.Errorf("make Secret %s the cluster's, to be deleted with it: %w", secret.Name, err)
		}
	}
	return nil
}

// setCertManagerWait reports a cluster that waits for cert-manager: nothing of it runs yet,
// unless it ran before the operator restarted without cert-manager.
func setCertManagerWait(c *etcdv1alpha1.EtcdCluster, w *certManagerWait) {
	c.Status.ObservedGeneration = c.Generation
	available := metav1.ConditionFalse
	if c.Status.ClusterID != "" {
		available = metav1.ConditionUnknown // it may still serve, unseen
	}
	setCondition(c, etcdv1alpha1.ConditionAvailable, available, w.reason, w.message)
	if w.reason == etcdv1alpha1.ReasonCertificatesNotReady {
		setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, w.reason, w.message)
	}
	if !w.failed {
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionFalse, w.reason, "waiting for cert-manager to issue the certificates")
		return
	}
	setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, w.reason, w.message)
}

// setCertificateProblem puts a problem of a running cluster's certificates first in Degraded:
// it is the likely cause of whatever else members show.
func setCertificateProblem(c *etcdv1alpha1.EtcdCluster, obs *observation) {
	if obs.access == nil || obs.access.tls == nil || obs.access.tls.problem == nil {
		return
	}
	p := obs.access.tls.problem
	setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, p.reason, p.message)
}

// asCertManagerWait is the wait err carries, or nil.
func asCertManagerWait(err error) *certManagerWait {
	var w *certManagerWait
	if errors.As(err, &w) {
		return w
	}
	return nil
}

// watchCertificates has the reconciler look again when a cluster's Certificate changes (issued,
// renewed, failing), where cert-manager is installed.
func (r *EtcdClusterReconciler) watchCertificates(b *builder.Builder) *builder.Builder {
	if !r.CertManager {
		return b
	}
	return b.Owns(newCertificate())
}

func newCertificate() *unstructured.Unstructured {
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(resources.CertificateGVK)
	return cert
}

// WithCertificates adds cert-manager's Certificates to what the cache holds, only the
// operator's, as for the other kinds it makes (CacheOptions). Only where cert-manager is
// installed: the cache cannot be made for a kind the API server does not serve.
func WithCertificates(opts cache.Options) cache.Options {
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.ByObject[newCertificate()] = cache.ByObject{Label: labels.SelectorFromSet(resources.ManagedBy())}
	return opts
}
