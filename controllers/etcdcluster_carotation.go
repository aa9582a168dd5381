package controllers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The CA of a cluster whose tls.provider is Operator is replaced without downtime by the steps
// certs.NextRotationStep decides (see internal/certs/rotation.go for the phases and what holds
// after each). This file observes what that decision needs, live from the members, and carries
// its steps out: the Secret writes here, the restarts and leadership moves through act, as the
// membership steps they are. A rotation moves only while membership has nothing to do (every
// member healthy, the spec met): a member being replaced or added loads the Secrets as they are
// then, which every phase keeps trusted by all.
//
// The rotation's own Secret (resources.CARotationSecretName) holds the new CA, the old CA's
// certificate, and a client certificate of each CA that asks members which CAs they trust. The
// new CA is stored there before its fingerprint is recorded in status, so that an operator
// stopped in between makes no second one.

// Keys of the rotation's Secret.
const (
	rotationNewCACert     = "new-ca.crt"
	rotationNewCAKey      = "new-ca.key"
	rotationOldCACert     = "old-ca.crt"
	rotationOldProbeCert  = "old-probe.crt"
	rotationOldProbeKey   = "old-probe.key"
	rotationNewProbeCert  = "new-probe.crt"
	rotationNewProbeKey   = "new-probe.key"
	caRotationTriggerAuto = "CAExpiring"
)

// The rotation's steps carried out by rotateCA; its restarts and leadership moves are
// membership steps.
const (
	stepMakeNewCA     = membership.Action(certs.MakeNewCA)
	stepPublishBundle = membership.Action(certs.PublishBundle)
	stepReissueLeaves = membership.Action(certs.ReissueLeaves)
	stepRecordCAPhase = membership.Action(certs.RecordPhase)
)

// caRotationUnderway: a rotation has begun and not reached Done.
func caRotationUnderway(c *etcdv1alpha1.EtcdCluster) bool {
	r := c.Status.CARotation
	return r != nil && r.Phase != etcdv1alpha1.CARotationPhase(certs.RotationDone)
}

// caRotationToBegin is the rotation to begin now, if one is asked for and none is under way:
// by a new value of the annotation etcd.database.dev/rotate-ca, or by the CA nearing its
// expiry (tls.caRenewBefore).
func caRotationToBegin(c *etcdv1alpha1.EtcdCluster, caPEM []byte, now time.Time) (*etcdv1alpha1.CARotationStatus, string, error) {
	if caRotationUnderway(c) {
		return nil, "", nil
	}
	ca, err := certs.ParseBundle(caPEM)
	if err != nil {
		return nil, "", fmt.Errorf("the CA in Secret %s: %w", resources.CASecretName(c.Name), err)
	}
	begin := func(trigger, why string) (*etcdv1alpha1.CARotationStatus, string, error) {
		return &etcdv1alpha1.CARotationStatus{
			Phase: etcdv1alpha1.CARotationPhase(certs.RotationPrepare), OldCA: certs.Fingerprint(ca[0]),
			Trigger: trigger, Annotation: c.Annotations[etcdv1alpha1.AnnotationRotateCA], StartTime: metav1.NewTime(now),
			Message: why,
		}, why, nil
	}
	asked := c.Annotations[etcdv1alpha1.AnnotationRotateCA]
	last := ""
	if c.Status.CARotation != nil {
		last = c.Status.CARotation.Annotation
	}
	if asked != "" && asked != last {
		return begin(caRotationTriggerRequested, fmt.Sprintf("the annotation %s asks for a new CA (%q)", etcdv1alpha1.AnnotationRotateCA, asked))
	}
	tlsSpec := c.Spec.TLS
	validity := resources.CertificateRequest(c, certs.Peer).Validity
	renewBefore, caRenewBefore := defaultRenewBefore, time.Duration(0)
	if tlsSpec.RenewBefore != nil {
		renewBefore = tlsSpec.RenewBefore.Duration
	}
	if tlsSpec.CARenewBefore != nil {
		caRenewBefore = tlsSpec.CARenewBefore.Duration
	}
	why, due, err := certs.CAReplacementDue(caPEM, validity, renewBefore, caRenewBefore, now)
	if err != nil || !due {
		return nil, "", err
	}
	return begin(caRotationTriggerAuto, why)
}

// caRotationTriggerRequested: a person asked, with the annotation.
const caRotationTriggerRequested = "Requested"

// rotationMaterial is what the rotation's Secret holds, parsed.
type rotationMaterial struct {
	secret         *corev1.Secret
	oldPEM, newPEM []byte
	cas            map[string]*x509.Certificate
	probes         []etcd.TrustProbe
}

// pemOf is the PEM certificate of the CA with that fingerprint.
func (m *rotationMaterial) pemOf(fingerprint string) ([]byte, bool) {
	for _, p := range [][]byte{m.oldPEM, m.newPEM} {
		if cas, err := certs.ParseBundle(p); err == nil && certs.Fingerprint(cas[0]) == fingerprint {
			return p, true
		}
	}
	return nil, false
}

// readRotationMaterial reads the rotation's Secret; nil when there is none, or it was made for
// another rotation (another old CA).
func (r *EtcdClusterReconciler) readRotationMaterial(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*rotationMaterial, error) {
	secret, err := getSecret(ctx, r.Client, c.Namespace, resources.CARotationSecretName(c.Name))
	if err != nil || secret == nil {
		return nil, err
	}
	m, err := parseRotationMaterial(secret)
	if err != nil {
		return nil, err
	}
	if rot := c.Status.CARotation; rot != nil && m.probes[0].CA != rot.OldCA {
		return nil, nil
	}
	return m, nil
}

// parseRotationMaterial reads what the rotation's Secret holds; the old CA's probe comes first.
func parseRotationMaterial(secret *corev1.Secret) (*rotationMaterial, error) {
	m := &rotationMaterial{secret: secret, oldPEM: secret.Data[rotationOldCACert], newPEM: secret.Data[rotationNewCACert], cas: map[string]*x509.Certificate{}}
	for _, p := range []struct {
		ca, cert, key string
	}{{rotationOldCACert, rotationOldProbeCert, rotationOldProbeKey}, {rotationNewCACert, rotationNewProbeCert, rotationNewProbeKey}} {
		cas, err := certs.ParseBundle(secret.Data[p.ca])
		if err != nil {
			return nil, fmt.Errorf("Secret %s, key %s: %w", secret.Name, p.ca, err)
		}
		pair, err := tls.X509KeyPair(secret.Data[p.cert], secret.Data[p.key])
		if err != nil {
			return nil, fmt.Errorf("Secret %s, key %s: %w", secret.Name, p.cert, err)
		}
		fp := certs.Fingerprint(cas[0])
		m.cas[fp] = cas[0]
		m.probes = append(m.probes, etcd.TrustProbe{CA: fp, Certificate: pair})
	}
	return m, nil
}

// caRotationObservation is what one reconcile observed of a rotation under way, and the step
// decided on it.
type caRotationObservation struct {
	material *rotationMaterial
	step     certs.RotationStep
}

// decideCARotation is the step of the CA rotation under way, once membership has nothing to do
// (settled is membership's step then): a membership step for a restart or a leadership move,
// one of caRotationActions for the rest, settled itself once the rotation is Done.
func (r *EtcdClusterReconciler) decideCARotation(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, in membership.Observed, settled membership.Step) (membership.Step, error) {
	rot := c.Status.CARotation
	if rot == nil || c.Spec.TLS == nil || c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderSecrets {
		return settled, nil
	}
	certManager := c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager
	material, err := r.rotationMaterialOf(ctx, c)
	if err != nil {
		return settled, err
	}
	if rot.Phase == etcdv1alpha1.CARotationPhase(certs.RotationDone) {
		// The probes' keys are client certificates the members accept: gone once not needed.
		if material != nil {
			if err := r.Delete(ctx, material.secret, client.Preconditions{UID: &material.secret.UID}); ignoreGone(err) != nil {
				return settled, fmt.Errorf("delete Secret %s: %w", material.secret.Name, err)
			}
		}
		if certManager {
			return settled, r.finishCertManagerRotation(ctx, c)
		}
		return settled, nil
	}
	waitFor := func(reason string) (membership.Step, error) {
		rot.Message = reason
		return membership.Step{Action: membership.Wait, Operation: membership.OpRotatingCA, Reason: "CA rotation (" + string(rot.Phase) + "): " + reason}, nil
	}
	world := certs.RotationWorld{Rotation: certs.Rotation{Phase: certs.RotationPhase(rot.Phase), Old: rot.OldCA, New: rot.NewCA}}
	if rot.NewCA != "" {
		if material == nil || material.newFingerprint() != rot.NewCA {
			return settled, fmt.Errorf("the new CA %s of the rotation under way is not in Secret %s any more: a new rotation is needed (set a new value on the annotation %s once this one is abandoned by removing status.caRotation)",
				rot.NewCA, resources.CARotationSecretName(c.Name), etcdv1alpha1.AnnotationRotateCA)
		}
		if len(material.probes) < 2 {
			return waitFor(fmt.Sprintf("cert-manager to issue the probe certificates %s and %s", resources.CAProbeName(c.Name, "old"), resources.CAProbeName(c.Name, "new")))
		}
		if world, err = r.observeCARotation(ctx, c, in, material, world); err != nil {
			return settled, err
		}
	} else if certManager {
		if issued, err := r.newProbeIssued(ctx, c); err != nil || !issued {
			ref := c.Spec.TLS.CertManager.IssuerRef
			reason, _ := waitFor(fmt.Sprintf("cert-manager to issue Certificate %s from %s %s, whose CA members are to trust", resources.CAProbeName(c.Name, "new"), ref.Kind, ref.Name))
			return reason, err
		}
	}
	step := certs.NextRotationStep(world)
	if certManager && step.Action == certs.ReissueLeaves {
		// The Certificates name the new issuer from Reissue on (resources.CertificateIssuer);
		// cert-manager issues them again.
		return waitFor(fmt.Sprintf("cert-manager to issue every certificate from %s %s", rot.ToIssuer.Kind, rot.ToIssuer.Name))
	}
	obs.caRotation = &caRotationObservation{material: material, step: step}
	rot.Message = step.Reason
	out := membership.Step{Operation: membership.OpRotatingCA, Member: step.Member, Reason: "CA rotation (" + string(rot.Phase) + "): " + step.Reason}
	ids := map[string]uint64{}
	for _, m := range in.Members {
		ids[m.Name] = m.ID
	}
	switch step.Action {
	case certs.RestartMember:
		out.Action, out.MemberID = membership.RollMember, ids[step.Member]
	case certs.MoveLeadership:
		out.Action, out.MemberID, out.Target = membership.MoveLeader, ids[step.Member], ids[step.Target]
	case certs.WaitForMembers:
		out.Action = membership.Wait
	case certs.RotationComplete:
		return settled, nil
	default:
		out.Action = membership.Action(step.Action)
	}
	return out, nil
}

// rotationMaterialOf is the rotation's material of the cluster's provider.
func (r *EtcdClusterReconciler) rotationMaterialOf(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*rotationMaterial, error) {
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager {
		return r.readCertManagerRotationMaterial(ctx, c)
	}
	return r.readRotationMaterial(ctx, c)
}

// newProbeIssued: cert-manager has written the new probe's Secret, from the issuer the spec
// names.
func (r *EtcdClusterReconciler) newProbeIssued(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (bool, error) {
	probe, err := getSecret(ctx, r.APIReader, c.Namespace, resources.CAProbeName(c.Name, "new"))
	if err != nil || probe == nil {
		return false, err
	}
	ref := c.Spec.TLS.CertManager.IssuerRef
	return probe.Annotations["cert-manager.io/issuer-name"] == ref.Name && probe.Annotations["cert-manager.io/issuer-kind"] == ref.Kind &&
		probe.Annotations["cert-manager.io/issuer-group"] == ref.Group && len(probe.Data[certs.KeyCert]) > 0, nil
}

func (m *rotationMaterial) newFingerprint() string {
	cas, err := certs.ParseBundle(m.newPEM)
	if err != nil {
		return ""
	}
	return certs.Fingerprint(cas[0])
}

// observeCARotation reads what the rotation's decision needs: the trust bundle and the leaves
// the Secrets hold, and, live from each healthy member's client and peer ports, the CAs its
// etcd trusts and the CA of the certificate it presents. Etcd reads its trusted CAs only at
// start: what its Secrets say now is not what it holds to.
func (r *EtcdClusterReconciler) observeCARotation(ctx context.Context, c *etcdv1alpha1.EtcdCluster, in membership.Observed, m *rotationMaterial, world certs.RotationWorld) (certs.RotationWorld, error) {
	names := resources.TLSSecrets(c)
	cas := make([]*x509.Certificate, 0, len(m.cas))
	for _, ca := range m.cas {
		cas = append(cas, ca)
	}
	certManager := c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager
	// cert-manager's Secrets are not the operator's: not in its cache.
	var from client.Reader = r.Client
	if certManager {
		from = r.APIReader
	}
	var bundles [][]byte
	issuers := map[string]string{}
	for _, name := range []string{names.Peer, names.Server, names.Client} {
		secret, err := getSecret(ctx, from, c.Namespace, name)
		if err != nil {
			return world, err
		}
		if secret == nil {
			return world, fmt.Errorf("TLS Secret %s not found", name)
		}
		bundles = append(bundles, secret.Data[certs.KeyCA])
		issuers[name] = certs.IssuerIn(secret.Data[certs.KeyCert], cas)
	}
	if certManager {
		bundle, err := getSecret(ctx, r.APIReader, c.Namespace, resources.TrustBundleSecretName(c.Name))
		if err != nil {
			return world, err
		}
		if bundle != nil {
			world.Bundle = certs.BundleFingerprints(bundle.Data[certs.KeyCA])
		}
	} else if slices.EqualFunc(bundles[1:], bundles[:len(bundles)-1], func(a, b []byte) bool { return string(a) == string(b) }) {
		world.Bundle = certs.BundleFingerprints(bundles[0])
	}
	if issuers[names.Peer] == issuers[names.Server] {
		world.LeavesFrom = issuers[names.Peer]
	}
	if certManager {
		// The users' certificate moves with the members': the old CA is dropped only once no
		// certificate the cluster hands out is of it.
		user, err := getSecret(ctx, r.APIReader, c.Namespace, resources.UserTLSSecretName(c.Name))
		if err != nil {
			return world, err
		}
		if user == nil || certs.IssuerIn(user.Data[certs.KeyCert], cas) != world.LeavesFrom {
			world.LeavesFrom = ""
		}
	}
	world.OperatorClientFrom = issuers[names.Client]
	for _, mem := range in.Members {
		if !mem.InEtcd() {
			continue
		}
		rm := certs.RotationMember{Name: mem.Name, Healthy: mem.Healthy, IsLeader: mem.IsLeader,
			Restarting: !mem.PodExists || mem.PodTerminating}
		if mem.Healthy {
			rm.Trusts, rm.Presents = r.memberTrust(ctx, c, mem.Name, m)
		}
		world.Members = append(world.Members, rm)
	}
	return world, nil
}

// memberTrust is what handshakes with a member's client and peer ports show: the CAs both
// trust, and the CA of the certificates they present when both present one of the same CA.
// Nothing (nil, "") when either cannot be asked.
func (r *EtcdClusterReconciler) memberTrust(ctx context.Context, c *etcdv1alpha1.EtcdCluster, member string, m *rotationMaterial) ([]string, string) {
	probe := r.ProbeTrust
	if probe == nil {
		probe = etcd.TrustOf
	}
	var seen []etcd.TrustSeen
	for _, port := range []int{resources.ClientPort, resources.PeerPort} {
		s, err := probe(ctx, resources.MemberHostPort(c, member, port), m.cas, m.probes)
		if err != nil {
			return nil, ""
		}
		seen = append(seen, s)
	}
	trusts := []string{}
	for _, ca := range seen[0].Trusts {
		if slices.Contains(seen[1].Trusts, ca) {
			trusts = append(trusts, ca)
		}
	}
	presents := seen[0].Presents
	if presents != seen[1].Presents {
		presents = ""
	}
	return trusts, presents
}

// rotateCA carries out the rotation step decideCARotation chose, other than a restart or a
// leadership move.
func (r *EtcdClusterReconciler) rotateCA(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	if obs.caRotation == nil {
		return fmt.Errorf("no CA rotation step was decided")
	}
	rot, step, material := c.Status.CARotation, obs.caRotation.step, obs.caRotation.material
	now := r.now()
	switch step.Action {
	case certs.MakeNewCA:
		if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager {
			var same bool
			var err error
			if material, same, err = r.obtainNewIssuerCA(ctx, c); err != nil {
				return err
			}
			if same {
				rot.Phase, rot.CompletionTime = etcdv1alpha1.CARotationPhase(certs.RotationDone), &metav1.Time{Time: now}
				rot.Message = "the new issuer signs with the CA members trust already: nothing to replace"
				return nil
			}
			if material == nil {
				return fmt.Errorf("the certificate from the new issuer is not issued yet")
			}
		} else if material == nil {
			var err error
			if material, err = r.makeRotationMaterial(ctx, c, now); err != nil {
				return err
			}
		}
		rot.NewCA = material.newFingerprint()
		// gofail: var caRotationNewCAMade struct{}
	case certs.PublishBundle:
		pems := make([][]byte, 0, len(step.Bundle))
		for _, fp := range step.Bundle {
			p, ok := material.pemOf(fp)
			if !ok {
				return fmt.Errorf("CA %s of the trust bundle is not in Secret %s", fp, material.secret.Name)
			}
			pems = append(pems, p)
		}
		publish := r.publishTrustBundle
		if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager {
			publish = r.publishCertManagerTrustBundle
		}
		if err := publish(ctx, c, certs.JoinBundle(pems...)); err != nil {
			return err
		}
	case certs.ReissueLeaves:
		newCA := certs.KeyPair{CertPEM: material.newPEM, KeyPEM: material.secret.Data[rotationNewCAKey]}
		if err := r.writeSecret(ctx, c, resources.CASecretName(c.Name), corev1.SecretTypeOpaque, newCA, newCA.CertPEM); err != nil {
			return err
		}
		// gofail: var caRotationCASwapped struct{}
		renewBefore := defaultRenewBefore
		if c.Spec.TLS.RenewBefore != nil {
			renewBefore = c.Spec.TLS.RenewBefore.Duration
		}
		if err := r.issueLeaves(ctx, c, newCA, renewBefore, now); err != nil {
			return err
		}
	case certs.RecordPhase:
		rot.Phase = etcdv1alpha1.CARotationPhase(step.Phase)
		if step.Phase == certs.RotationDone {
			rot.CompletionTime = &metav1.Time{Time: now}
			rot.Message = "the new CA is the only one trusted and used"
		}
	default:
		return fmt.Errorf("not a CA rotation step carried out here: %s", step.Action)
	}
	return nil
}

// makeRotationMaterial makes the new CA, and a client certificate of each CA to ask members
// with, and stores them in the rotation's Secret (replacing one left by an earlier rotation).
func (r *EtcdClusterReconciler) makeRotationMaterial(ctx context.Context, c *etcdv1alpha1.EtcdCluster, now time.Time) (*rotationMaterial, error) {
	caSecret, err := getSecret(ctx, r.Client, c.Namespace, resources.CASecretName(c.Name))
	if err != nil {
		return nil, err
	}
	if caSecret == nil {
		return nil, fmt.Errorf("the CA Secret %s is gone", resources.CASecretName(c.Name))
	}
	oldCA := certs.KeyPair{CertPEM: caSecret.Data[certs.KeyCert], KeyPEM: caSecret.Data[certs.KeyKey]}
	if cas, err := certs.ParseBundle(oldCA.CertPEM); err != nil || certs.Fingerprint(cas[0]) != c.Status.CARotation.OldCA {
		return nil, fmt.Errorf("the CA in Secret %s is not the one the rotation replaces (%s)", caSecret.Name, c.Status.CARotation.OldCA)
	}
	validity := resources.CertificateRequest(c, certs.Peer).Validity
	newCA, err := certs.NewCA(c.Name+"-ca", 10*validity, now)
	if err != nil {
		return nil, err
	}
	probe := certs.Request{Kind: certs.Client, CommonName: "etcd-operator-ca-probe", Validity: validity}
	oldProbe, err := certs.Issue(oldCA, probe, now)
	if err != nil {
		return nil, err
	}
	newProbe, err := certs.Issue(newCA, probe, now)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: resources.CARotationSecretName(c.Name), Namespace: c.Namespace, Labels: resources.ClusterLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			rotationNewCACert: newCA.CertPEM, rotationNewCAKey: newCA.KeyPEM, rotationOldCACert: oldCA.CertPEM,
			rotationOldProbeCert: oldProbe.CertPEM, rotationOldProbeKey: oldProbe.KeyPEM,
			rotationNewProbeCert: newProbe.CertPEM, rotationNewProbeKey: newProbe.KeyPEM,
		},
	}
	if err := r.writeRotationSecret(ctx, c, secret); err != nil {
		return nil, err
	}
	postEvent(r.Recorder, c, corev1.EventTypeNormal, "CACreated", "RotateCA", "made a new CA to replace %s", c.Status.CARotation.OldCA)
	// From what was written, not read back: the cache may not hold it yet.
	return parseRotationMaterial(secret)
}

// writeRotationSecret creates the rotation's Secret, or replaces one an earlier rotation left.
func (r *EtcdClusterReconciler) writeRotationSecret(ctx context.Context, c *etcdv1alpha1.EtcdCluster, secret *corev1.Secret) error {
	existing, err := getSecret(ctx, r.APIReader, c.Namespace, secret.Name)
	if err != nil {
		return err
	}
	if existing == nil {
		return r.createOwned(ctx, c, secret)
	}
	existing.Data = secret.Data
	if err := r.Update(ctx, existing); err != nil {
		return fmt.Errorf("update Secret %s: %w", secret.Name, err)
	}
	return nil
}

// publishCertManagerTrustBundle writes bundle as the ca.crt of the trust bundle Secret, which
// members mount (provider CertManager).
func (r *EtcdClusterReconciler) publishCertManagerTrustBundle(ctx context.Context, c *etcdv1alpha1.EtcdCluster, bundle []byte) error {
	secret, err := getSecret(ctx, r.APIReader, c.Namespace, resources.TrustBundleSecretName(c.Name))
	if err != nil {
		return err
	}
	if secret == nil {
		return fmt.Errorf("trust bundle Secret %s not found", resources.TrustBundleSecretName(c.Name))
	}
	if bytes.Equal(secret.Data[certs.KeyCA], bundle) {
		return nil
	}
	secret.Data[certs.KeyCA] = bundle
	if err := r.Update(ctx, secret); err != nil {
		return fmt.Errorf("update Secret %s: %w", secret.Name, err)
	}
	return nil
}

// publishTrustBundle writes bundle as the ca.crt of the peer, server and client Secrets: what a
// member loads when it starts, and what the operator, its Jobs and clients verify members with.
func (r *EtcdClusterReconciler) publishTrustBundle(ctx context.Context, c *etcdv1alpha1.EtcdCluster, bundle []byte) error {
	names := resources.TLSSecrets(c)
	for _, name := range []string{names.Peer, names.Server, names.Client} {
		secret, err := getSecret(ctx, r.Client, c.Namespace, name)
		if err != nil {
			return err
		}
		if secret == nil {
			return fmt.Errorf("TLS Secret %s not found", name)
		}
		if string(secret.Data[certs.KeyCA]) == string(bundle) {
			continue
		}
		secret.Data[certs.KeyCA] = bundle
		if err := r.Update(ctx, secret); err != nil {
			return fmt.Errorf("update Secret %s: %w", name, err)
		}
	}
	return nil
}

// trustBundle is the ca.crt of the certificate Secrets: the cluster's CA, and while a rotation
// is in TrustBoth or Reissue the old and the new CA, in DropOld the new alone.
func (r *EtcdClusterReconciler) trustBundle(ctx context.Context, c *etcdv1alpha1.EtcdCluster, caPEM []byte) ([]byte, error) {
	rot := c.Status.CARotation
	if rot == nil {
		return caPEM, nil
	}
	switch certs.RotationPhase(rot.Phase) {
	case certs.RotationTrustBoth, certs.RotationReissue, certs.RotationDropOld:
	default:
		return caPEM, nil
	}
	m, err := r.readRotationMaterial(ctx, c)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("the rotation's Secret %s is gone", resources.CARotationSecretName(c.Name))
	}
	if certs.RotationPhase(rot.Phase) == certs.RotationDropOld {
		return certs.JoinBundle(m.newPEM), nil
	}
	return certs.JoinBundle(m.oldPEM, m.newPEM), nil
}
