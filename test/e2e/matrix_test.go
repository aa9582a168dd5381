//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/matrix"
)

// The day-two matrix: clusters of every kind (test/matrix's options), each taken through the
// operations a user runs on it (test/matrix's operations), the cells generated from that table.
// After every operation, what a user relies on is checked: it completed without a person (but
// the annotation that is the person's part), the cluster is Available at its size with etcd,
// pods and claims agreeing, every member holds the same keyspace (HashKV), that keyspace is
// exactly what the user wrote (as of the snapshot, after a restore), and no backup, verification
// or restore reported failing. At the end, every pod the operator made honoured the cluster's
// pod template (placement, pull secrets). The operator's logs are searched for the cell's
// secrets with the rest of the suite's.
//
// E2E_MATRIX says which cells: covering (every operation on every value of every option, as CI
// runs it), pairs (every pair of option values, every operation that applies to each) or full
// (the product). E2E_MATRIX_CELLS, a regexp, runs only the cells whose names it matches.
func TestMatrix(t *testing.T) {
	t.Parallel() // its cells queue with the other parallel tests, the longest first
	var cells []matrix.Cell
	values := matrix.Values{matrix.Nodes: {"one"}}
	if os.Getenv("E2E_SECOND_NODE") != "" {
		values = nil
	}
	switch mode := os.Getenv("E2E_MATRIX"); mode {
	case "":
		t.Skip("E2E_MATRIX is not set: make test-e2e runs the covering cells, make test-matrix the pairs")
	case "covering":
		cells = matrix.Covering(values)
	case "pairs":
		cells = matrix.AllPairs(values)
	case "full":
		cells = matrix.Full(values)
	default:
		t.Fatalf("E2E_MATRIX=%q: want covering, pairs or full", mode)
	}
	only, err := regexp.Compile(os.Getenv("E2E_MATRIX_CELLS"))
	if err != nil {
		t.Fatalf("E2E_MATRIX_CELLS: %v", err)
	}
	for i, cell := range cells {
		if !only.MatchString(cell.Name()) {
			continue
		}
		t.Run(cell.Name(), func(t *testing.T) {
			inParallel(t, expectedCellTime(cell.Operations))
			m := newMatrixCell(t, i, cell.Config)
			for _, op := range cell.Operations {
				began := time.Now()
				if !t.Run(op, func(t *testing.T) { m.run(t, op) }) {
					return // the operations after it build on it
				}
				t.Logf("%s: %v", op, time.Since(began).Round(time.Second))
			}
			m.checkPods(t)
		})
	}
}

// expectedCellTime: about what a cell with these operations took in CI (2026-11-29): the
// recoveries of a lost quorum or cluster wait quorumLossRecovery.after and then recreate
// members, 2 to 4 minutes each; the others half a minute, the cluster's start a minute.
func expectedCellTime(operations []string) time.Duration {
	expected := time.Minute
	for _, op := range operations {
		switch op {
		case matrix.RecoverByHand, matrix.RecoverByPolicy, matrix.RecoverFromBackups:
			expected += 3 * time.Minute
		default:
			expected += 30 * time.Second
		}
	}
	return expected
}

// Passwords of the matrix's clusters with root authentication: the first, and the one a
// rotation sets.
const (
	matrixPassword        = "matrix-first-password"
	matrixRotatedPassword = "matrix-rotated-password"
)

// matrixCell is one cluster of the matrix and what its operations share.
type matrixCell struct {
	cfg     matrix.Config
	ns      string
	cluster *etcdv1alpha1.EtcdCluster
	// password is root's, with authentication on.
	password string
	// want is the keyspace the user wrote, which etcd must hold.
	want map[string]string
	s3   *s3Server
	// backups by operation, with the keyspace each snapshot holds.
	backups     map[string]*etcdv1alpha1.EtcdBackup
	backedUp    map[string]map[string]string
	restoreName int
	pods        *podRecorder
	// suffix keeps the names of what the cell writes apart from the other cells'.
	suffix string
	// keptClaims are the claims of members the cell's quorum recoveries did without, which the
	// operator keeps (as a later recovery's record no longer names them).
	keptClaims map[string]bool
}

// matrixKeys is how many keys a cell's cluster holds before its first operation.
const matrixKeys = 40

func newMatrixCell(t *testing.T, index int, cfg matrix.Config) *matrixCell {
	m := &matrixCell{cfg: cfg, ns: testNamespace(t, fmt.Sprintf("e2e-matrix-%d-", index)), want: map[string]string{},
		backups: map[string]*etcdv1alpha1.EtcdBackup{}, backedUp: map[string]map[string]string{}, suffix: strconv.Itoa(index),
		keptClaims: map[string]bool{}}
	m.pods = recordPods(t, m.ns)
	if cfg[matrix.Namespace] == "quota" {
		create(t, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "demands-limits", Namespace: m.ns}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceRequestsCPU: resource.MustParse("20"), corev1.ResourceRequestsMemory: resource.MustParse("64Gi"),
			corev1.ResourceLimitsMemory: resource.MustParse("128Gi"),
		}}})
	}
	m.cluster = m.clusterSpec(t, "m", cfg)
	create(t, m.cluster)
	size, _ := strconv.Atoi(cfg[matrix.Size])
	m.converged(t, m.cluster, size)
	cl := m.client(t, m.cluster)
	defer cl.Close()
	for i := range matrixKeys {
		m.put(t, cl, fmt.Sprintf("m/k%03d", i), fmt.Sprintf("v%03d", i))
	}
	m.expectData(t, m.cluster)
	return m
}

// clusterSpec is an EtcdCluster of cfg named name, with what it needs made first: TLS Secrets,
// root's Secret, a pull secret.
func (m *matrixCell) clusterSpec(t *testing.T, name string, cfg matrix.Config) *etcdv1alpha1.EtcdCluster {
	size, _ := strconv.Atoi(cfg[matrix.Size])
	version := map[string]string{"3.6": etcdVersion, "3.7": etcdNextVersion}[cfg[matrix.Version]]
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: int32(size), Version: version,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			// Small requests, so that the cells' members fit the node's CPU beside each other.
			PodTemplate: etcdv1alpha1.PodTemplate{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			}},
		},
	}
	switch cfg[matrix.TLS] {
	case "operator":
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{}
	case "secrets":
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderSecrets, Secrets: &etcdv1alpha1.TLSSecrets{
			Peer: name + "-my-peer", Server: name + "-my-server", Client: name + "-my-client"}}
		m.createTLSSecrets(t, c)
	}
	if cfg[matrix.Auth] == "root" {
		// One Secret for the cell's clusters: a restored copy takes root's password of now.
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: m.ns, Name: "root"}, &corev1.Secret{}); err != nil {
			m.password = matrixPassword
			create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: m.ns}, StringData: map[string]string{"password": m.password}})
		}
		c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
	}
	if cfg[matrix.Placement] == "template" {
		c.Spec.PodTemplate.NodeSelector = matrixNodeSelector
		c.Spec.PodTemplate.Tolerations = matrixTolerations
	}
	if cfg[matrix.Repository] == "private" {
		c.Spec.Repository = envOr("E2E_ETCD_REPOSITORY", "ghcr.io/etcd-database/etcd")
		c.Spec.PodTemplate.ImagePullSecrets = []corev1.LocalObjectReference{{Name: matrixPullSecret}}
		m.createPullSecret(t, c.Spec.Repository)
	}
	return c
}

// The pod template of placement "template": a node selector every node of the local cluster
// matches, and a toleration of a taint no node has, so that the check is of what the pods carry.
var (
	matrixNodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	matrixTolerations  = []corev1.Toleration{{Key: "e2e.etcd.database.dev/dedicated", Operator: corev1.TolerationOpEqual, Value: "etcd", Effect: corev1.TaintEffectNoSchedule}}
)

// matrixPullSecret is the pull secret of repository "private": the local registry asks none,
// so what is checked is that every pod running the etcd image carries it.
const matrixPullSecret = "etcd-pull"

func (m *matrixCell) createPullSecret(t *testing.T, repository string) {
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: m.ns, Name: matrixPullSecret}, &corev1.Secret{}); err == nil {
		return
	}
	registry, _, _ := strings.Cut(repository, "/")
	config, err := json.Marshal(map[string]any{"auths": map[string]any{registry: map[string]string{"username": "matrix", "password": "not-needed"}}})
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: matrixPullSecret, Namespace: m.ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: config}})
}

// createTLSSecrets makes the user's Secrets of tls.provider Secrets: a CA of the user's, and
// from it the peer, server and client certificates for the names the cluster needs.
// createTLSSecrets makes the Secrets of TLS "secrets": each kind of certificate from a CA of
// its own, each ca.crt holding the other end's CA (the server Secret's the client's CA, which
// members accept; the client Secret's the server's, which the operator and its Jobs verify).
func (m *matrixCell) createTLSSecrets(t *testing.T, c *etcdv1alpha1.EtcdCluster) {
	now := time.Now()
	issuers := map[certs.Kind]certs.KeyPair{}
	for _, kind := range certs.Leaves {
		ca, err := certs.NewCA("matrix user "+string(kind)+" CA", 24*time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		issuers[kind] = ca
	}
	trusted := map[certs.Kind][]byte{certs.Peer: issuers[certs.Peer].CertPEM, certs.Server: issuers[certs.Client].CertPEM, certs.Client: issuers[certs.Server].CertPEM}
	names := resources.TLSSecrets(c)
	for kind, secret := range map[certs.Kind]string{certs.Peer: names.Peer, certs.Server: names.Server, certs.Client: names.Client} {
		req := resources.CertificateRequest(c, kind)
		req.Validity = 12 * time.Hour
		kp, err := certs.Issue(issuers[kind], req, now)
		if err != nil {
			t.Fatal(err)
		}
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: m.ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{certs.KeyCert: kp.CertPEM, certs.KeyKey: kp.KeyPEM, certs.KeyCA: trusted[kind]}})
	}
}

// run carries out one operation and checks the cluster after it.
func (m *matrixCell) run(t *testing.T, op string) {
	switch op {
	case matrix.BackupToS3:
		if m.s3 == nil {
			m.s3 = startS3Server(t, m.ns)
			m.s3.createBucket(t, backupBucket)
		}
		m.backUp(t, op, etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: backupBucket, Prefix: "matrix/", Endpoint: m.s3.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
			CredentialsSecretName: m.s3.CredentialsSecret,
		}}, nil)
	case matrix.BackupToClaim:
		claim := createClaim(t, m.ns, "backups")
		m.backUp(t, op, etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: claim.Name, SubPath: "snapshots"}},
			&etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways})
	case matrix.ScaleUpAndDown:
		size := m.cluster.Spec.Size
		for _, to := range []int32{size + 2, size} {
			patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = to })
			m.converged(t, m.cluster, int(to))
		}
	case matrix.Defragment:
		m.defragment(t)
	case matrix.RotatePassword:
		m.rotatePassword(t)
	case matrix.UpgradeMinor:
		patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Version = etcdNextVersion })
		m.waitCluster(t, m.cluster, "every member on "+etcdNextVersion, func(c *etcdv1alpha1.EtcdCluster) bool { return c.Status.CurrentVersion == etcdNextVersion })
	case matrix.ReplaceLostMember:
		loseMembers(t, m.cluster, 1, claimsGone)
	case matrix.RestoreNew:
		m.restoreNew(t)
		return // checked on the new cluster
	case matrix.RestorePointInTime:
		m.restorePointInTime(t)
		return // checked on the new cluster
	case matrix.RestoreInPlace:
		m.restore(t, etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: m.cluster.Name}, matrix.BackupToS3)
	case matrix.RecoverByHand:
		m.recoverByHand(t)
	case matrix.RecoverByPolicy:
		m.recoverByPolicy(t)
	case matrix.RecoverFromBackups:
		m.recoverFromBackups(t)
	default:
		t.Fatalf("the matrix has no step for operation %q", op)
	}
	m.converged(t, m.cluster, int(m.cluster.Spec.Size))
	m.expectData(t, m.cluster)
}

// backUp takes a one-shot backup to dest and waits for it, and its verification if asked;
// then writes a key the snapshot does not have.
func (m *matrixCell) backUp(t *testing.T, op string, dest etcdv1alpha1.StorageLocation, verify *etcdv1alpha1.BackupVerification) {
	name := strings.ToLower(strings.NewReplacer(" ", "-", ",", "").Replace(op))
	b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: m.cluster.Name, Destination: dest, Verify: verify}}
	create(t, b)
	waitBackupPhase(t, b, convergeTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	art := b.Status.LastBackup
	if b.Status.Phase != etcdv1alpha1.BackupCompleted || art == nil {
		t.Fatalf("backup %s: %+v", b.Name, b.Status)
	}
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(m.cluster), m.cluster); err != nil {
		t.Fatal(err)
	}
	if art.ClusterUID != m.cluster.UID {
		t.Errorf("the snapshot records cluster UID %q, want %s's, %s", art.ClusterUID, m.cluster.Name, m.cluster.UID)
	}
	if verify != nil {
		m.waitBackup(t, b, "the snapshot verified", func(b *etcdv1alpha1.EtcdBackup) bool {
			v := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionVerified)
			return v != nil && v.Status != metav1.ConditionUnknown
		})
		if v := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionVerified); v.Status != metav1.ConditionTrue {
			t.Fatalf("verification of %s: %s %s: %s", art.URI, v.Status, v.Reason, v.Message)
		}
	}
	m.backups[op], m.backedUp[op] = b, maps.Clone(m.want)
	cl := m.client(t, m.cluster)
	defer cl.Close()
	m.put(t, cl, "m/after-"+name, "not in the snapshot")
}

// restoreNew restores the S3 backup into a new cluster of the same kind, and checks it holds
// the snapshot's keyspace; the new cluster is then deleted.
func (m *matrixCell) restoreNew(t *testing.T) {
	name := "m-copy"
	target := m.clusterSpec(t, name, m.cfg)
	rs := m.restore(t, etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: name, Cluster: &target.Spec}, matrix.BackupToS3)
	copyOf := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns}}
	m.converged(t, copyOf, int(target.Spec.Size))
	saved := m.want
	m.want = m.backedUp[matrix.BackupToS3]
	m.expectData(t, copyOf)
	m.want = saved
	if rs.Status.Phase == etcdv1alpha1.RestoreCompleted {
		if err := k8sClient.Delete(context.Background(), copyOf); err != nil {
			t.Errorf("delete the restored copy: %v", err)
		}
	}
}

// restorePointInTime archives the cluster continuously to S3, writes a key, notes the
// revision, writes another, and restores that revision into a new cluster of the same kind: it
// must hold exactly the keyspace of then. The archiving backup and the copy are deleted after.
// The copy has one member: what a point-in-time restore adds (the archiver on a cluster of
// this kind, the replay into a scratch member) does not depend on the target's size, and a
// built snapshot restored into clusters of every size is the backup restore's operation.
func (m *matrixCell) restorePointInTime(t *testing.T) {
	if m.s3 == nil {
		m.s3 = startS3Server(t, m.ns)
		m.s3.createBucket(t, backupBucket)
	}
	b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "archived", Namespace: m.ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: m.cluster.Name, Schedule: "@yearly",
			Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: backupBucket, Prefix: "matrix-archive/", Endpoint: m.s3.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
				CredentialsSecretName: m.s3.CredentialsSecret,
			}},
			Continuous: &etcdv1alpha1.ContinuousArchive{SegmentDuration: &metav1.Duration{Duration: 5 * time.Second}},
		}}
	create(t, b)
	m.waitBackup(t, b, "the archive started", func(b *etcdv1alpha1.EtcdBackup) bool {
		return b.Status.Archive != nil && b.Status.Archive.RecoverableRange != nil
	})
	cl := m.client(t, m.cluster)
	defer cl.Close()
	m.put(t, cl, "m/point-before", "in the point")
	point := currentRevision(t, cl)
	atPoint := maps.Clone(m.want)
	m.put(t, cl, "m/point-after", "not in the point")
	last := currentRevision(t, cl)
	m.waitBackup(t, b, fmt.Sprintf("revision %d archived", last), func(b *etcdv1alpha1.EtcdBackup) bool {
		a := b.Status.Archive
		return a != nil && a.RecoverableRange != nil && a.RecoverableRange.Last.Revision >= last
	})

	name := "m-point"
	target := m.clusterSpec(t, name, m.cfg)
	// The version the cluster runs now (upgraded, perhaps, by an earlier operation): the base
	// of the point was written by it, and an older etcd cannot read it.
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(m.cluster), m.cluster); err != nil {
		t.Fatal(err)
	}
	target.Spec.Version = m.cluster.Spec.Version
	target.Spec.Size = 1
	m.restoreName++
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restore-%d", m.restoreName), Namespace: m.ns},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: b.Name, Revision: &point}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: name, Cluster: &target.Spec},
		},
	}
	create(t, rs)
	waitRestorePhase(t, rs, convergeTimeout)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.PointInTime == nil || rs.Status.PointInTime.Revision != point {
		t.Fatalf("restore of revision %d: %+v", point, rs.Status)
	}
	copyOf := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns}}
	m.converged(t, copyOf, int(target.Spec.Size))
	saved := m.want
	m.want = atPoint
	m.expectData(t, copyOf)
	m.want = saved
	for _, o := range []client.Object{copyOf, b} {
		if err := k8sClient.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete %s: %v", o.GetName(), err)
		}
	}
}

// currentRevision is the revision cl's cluster is at.
func currentRevision(t *testing.T, cl *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, "m/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// restore restores the backup of operation from into target and waits for it to complete; in
// place, the cluster then holds the snapshot's keyspace.
func (m *matrixCell) restore(t *testing.T, target etcdv1alpha1.RestoreTarget, from string) *etcdv1alpha1.EtcdRestore {
	m.restoreName++
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restore-%d", m.restoreName), Namespace: m.ns},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: m.backups[from].Name}},
			Target: target,
		},
	}
	create(t, rs)
	waitRestorePhase(t, rs, convergeTimeout)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("restore %s from %s: %+v", rs.Name, m.backups[from].Name, rs.Status)
	}
	if target.Mode == etcdv1alpha1.RestoreInPlace {
		m.want = maps.Clone(m.backedUp[from])
	}
	return rs
}

// defragment leaves free space in the members' databases (3 MiB of values written, deleted and
// compacted away), lowers the policy's size floor so that it counts, waits for the operator to
// defragment a member, and puts the defaults back.
func (m *matrixCell) defragment(t *testing.T) {
	cl := m.client(t, m.cluster)
	defer cl.Close()
	filler := strings.Repeat("x", 8<<10)
	for i := range 400 {
		m.put(t, cl, fmt.Sprintf("m/churn/%03d", i), filler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Delete(ctx, "m/churn/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		delete(m.want, fmt.Sprintf("m/churn/%03d", i))
	}
	if _, err := cl.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// Written on, as a cluster in use is: at the compaction's own revision, members that made
	// it answer HashKV with the hash they took then, and a member replaced later cannot be
	// compared with them (etcdtest.KeyspacesDiffer).
	m.put(t, cl, "m/after-compaction", "written past the compaction")
	since := time.Now()
	patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Defragmentation.ThresholdPercent, c.Spec.Defragmentation.MinimumDBSize = 10, ptrTo(resource.MustParse("1Ki"))
	})
	defer patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Defragmentation.ThresholdPercent, c.Spec.Defragmentation.MinimumDBSize = 50, ptrTo(resource.MustParse("100Mi"))
	})
	waitForWithin(t, "a member defragmented", convergeTimeout, func(ctx context.Context) (bool, error) {
		events := &corev1.EventList{}
		if err := k8sClient.List(ctx, events, client.InNamespace(m.ns)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == etcdv1alpha1.ReasonDefragmenting && eventTime(e).After(since) && strings.HasPrefix(e.Message, "defragmented ")
		}), nil
	})
}

// rotatePassword changes root's password in its Secret: etcd takes the new one and refuses the
// old.
func (m *matrixCell) rotatePassword(t *testing.T) {
	secret := &corev1.Secret{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: m.ns, Name: "root"}, secret); err != nil {
		t.Fatal(err)
	}
	old := m.password
	secret.Data = map[string][]byte{"password": []byte(matrixRotatedPassword)}
	if err := k8sClient.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	m.password = matrixRotatedPassword
	waitForWithin(t, "etcd to take the new password and refuse the old", convergeTimeout, func(ctx context.Context) (bool, error) {
		return m.putWith(m.cluster, m.password) == nil && m.putWith(m.cluster, old) != nil, nil
	})
}

// recoverByHand loses a majority for good and recovers from the survivor the operator offers,
// by the annotation it names.
func (m *matrixCell) recoverByHand(t *testing.T) {
	patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryManual}
	})
	size := int(m.cluster.Spec.Size)
	lost := loseMembers(t, m.cluster, size/2+1, claimsGone)
	survivors := slices.DeleteFunc(memberNames(m.cluster), func(n string) bool { return slices.Contains(lost, n) })
	annotate(t, m.cluster, etcdv1alpha1.AnnotationRecoverFrom, awaitManualRecoveryOffer(t, m.cluster, survivors))
	m.waitRecovered(t, lost)
}

// recoverByPolicy loses a majority for good and lets policy ForceNewCluster recover it, after
// the shortest wait the policy allows.
func (m *matrixCell) recoverByPolicy(t *testing.T) {
	patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster,
			After: &metav1.Duration{Duration: membership.MinRecoveryAfter}}
	})
	size := int(m.cluster.Spec.Size)
	m.waitRecovered(t, loseMembers(t, m.cluster, size/2+1, claimsGone))
}

// recoverFromBackups loses every member for good and lets policy FromLatestBackup restore the
// newest snapshot: the claim's, verified, taken last.
func (m *matrixCell) recoverFromBackups(t *testing.T) {
	patchSpec(t, m.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup,
			After: &metav1.Duration{Duration: membership.MinRecoveryAfter}}
	})
	lost := loseMembers(t, m.cluster, int(m.cluster.Spec.Size), claimsGone)
	qr := m.waitRecovered(t, lost)
	b := m.backups[matrix.BackupToClaim]
	if qr.Backup == nil || qr.Backup.EtcdBackup != b.Name || qr.Backup.SnapshotURI != b.Status.LastBackup.URI {
		t.Fatalf("status.quorumRecovery %+v: want a restore of %s's snapshot %s", *qr, b.Name, b.Status.LastBackup.URI)
	}
	m.want = maps.Clone(m.backedUp[matrix.BackupToClaim])
}

// waitRecovered waits for the recovery of the loss of lost to complete, and returns its record.
func (m *matrixCell) waitRecovered(t *testing.T, lost []string) *etcdv1alpha1.QuorumRecoveryStatus {
	// Done without: the members lost, and a survivor not chosen.
	m.waitCluster(t, m.cluster, fmt.Sprintf("the loss of %v recovered", lost), func(c *etcdv1alpha1.EtcdCluster) bool {
		qr := c.Status.QuorumRecovery
		return qr != nil && qr.CompletionTime != nil && !slices.Contains(lost, qr.Member) &&
			!slices.ContainsFunc(lost, func(name string) bool { return !slices.Contains(qr.LostMembers, name) })
	})
	if qr := m.cluster.Status.QuorumRecovery; qr.Abandoned != "" {
		t.Fatalf("the recovery was given up: %s", qr.Abandoned)
	}
	return m.cluster.Status.QuorumRecovery
}

// converged waits until c is Available with size voters, etcd, pods and claims agreeing, and
// every member's keyspace the same.
func (m *matrixCell) converged(t *testing.T, c *etcdv1alpha1.EtcdCluster, size int) {
	t.Helper()
	m.waitCluster(t, c, fmt.Sprintf("Available with %d voters", size), func(c *etcdv1alpha1.EtcdCluster) bool { return isAvailable(c, size) })
	if qr := c.Status.QuorumRecovery; qr != nil {
		for _, member := range qr.LostMembers {
			m.keptClaims[resources.PVCName(member)] = true
		}
	}
	var why string
	err := pollUntil(context.Background(), convergeTimeout, func(ctx context.Context) (bool, error) {
		was := why
		why = membersMatch(ctx, c, size, func() *clientv3.Client { return m.clientOrNil(c) }, m.keptClaims)
		if why == "" {
			why = m.keyspacesDiffer(ctx, c)
		}
		if why != "" && why != was {
			t.Logf("%s: not converged yet: %s", c.Name, why)
		}
		return why == "", nil
	})
	if err != nil {
		t.Fatalf("%s: etcd, pods and claims do not match, or the members' data differs, after %v: %s (%v)", c.Name, convergeTimeout, why, err)
	}
}

// expectData checks that c holds exactly the keys the user wrote (under m/), with their values.
func (m *matrixCell) expectData(t *testing.T, c *etcdv1alpha1.EtcdCluster) {
	t.Helper()
	cl := m.client(t, c)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, "m/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(got, m.want) {
		var missing, extra []string
		for k, v := range m.want {
			if got[k] != v {
				missing = append(missing, k)
			}
		}
		for k := range got {
			if _, ok := m.want[k]; !ok {
				extra = append(extra, k)
			}
		}
		slices.Sort(missing)
		slices.Sort(extra)
		t.Fatalf("%s holds %d keys, want %d: missing or changed %v, not written %v", c.Name, len(got), len(m.want), missing, extra)
	}
}

func (m *matrixCell) put(t *testing.T, cl *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, key, value); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	m.want[key] = value
}

// putWith writes a key as root with password, through c's client Service.
func (m *matrixCell) putWith(c *etcdv1alpha1.EtcdCluster, password string) error {
	a, err := accessOf(c)
	if err != nil {
		return err
	}
	// With TLS, the members ask for a client certificate; with a user and password as well,
	// etcd takes the password.
	a.user, a.password = "root", password
	cl := a.client()
	if cl == nil {
		return fmt.Errorf("no client")
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cl.Put(ctx, "m-password-check", "x")
	return err
}

func (m *matrixCell) waitCluster(t *testing.T, c *etcdv1alpha1.EtcdCluster, what string, done func(*etcdv1alpha1.EtcdCluster) bool) {
	t.Helper()
	waitForWithin(t, c.Name+": "+what, convergeTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && done(c), nil
	})
}

func (m *matrixCell) waitBackup(t *testing.T, b *etcdv1alpha1.EtcdBackup, what string, done func(*etcdv1alpha1.EtcdBackup) bool) {
	t.Helper()
	waitForWithin(t, b.Name+": "+what, convergeTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)
		return err == nil && done(b), nil
	})
}

// client is a client of c through its client Service, as root with the password of now where
// authentication is on.
func (m *matrixCell) client(t *testing.T, c *etcdv1alpha1.EtcdCluster) *clientv3.Client {
	t.Helper()
	cl := m.clientOrNil(c)
	if cl == nil {
		t.Fatalf("no client of %s", c.Name)
	}
	return cl
}

func (m *matrixCell) clientOrNil(c *etcdv1alpha1.EtcdCluster) *clientv3.Client {
	a, err := accessOf(c)
	if err != nil {
		return nil
	}
	if c.Spec.Auth != nil {
		a.user, a.password = "root", m.password
	}
	return a.client()
}

// keyspacesDiffer says how c's members' keyspaces differ, each asked at its pod (etcdtest's
// KeyspacesDiffer), or "".
func (m *matrixCell) keyspacesDiffer(ctx context.Context, c *etcdv1alpha1.EtcdCluster) string {
	a, err := accessOf(c)
	if err != nil {
		return err.Error()
	}
	if c.Spec.Auth != nil {
		a.user, a.password = "root", m.password
	}
	return memberKeyspacesDiffer(ctx, c, a)
}

// etcdAccess is how a client reaches a cluster: the endpoint it names (the client Service's DNS
// name with TLS, which the server's certificate carries), the address it dials (the Service's
// cluster IP), and its credentials.
type etcdAccess struct {
	endpoint, addr string
	tls            *tls.Config
	user, password string
}

// accessOf is how to reach c through its client Service, with the operator's client
// certificate (root's) where c has TLS.
func accessOf(c *etcdv1alpha1.EtcdCluster) (etcdAccess, error) {
	ctx := context.Background()
	svc := &corev1.Service{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.ClientServiceName(c.Name)}, svc); err != nil {
		return etcdAccess{}, err
	}
	addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(resources.ClientPort))
	if c.Spec.TLS == nil {
		return etcdAccess{endpoint: "http://" + addr, addr: addr}, nil
	}
	secret := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.TLSSecrets(c).Client}, secret); err != nil {
		return etcdAccess{}, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data[certs.KeyCA])
	pair, err := tls.X509KeyPair(secret.Data[certs.KeyCert], secret.Data[certs.KeyKey])
	if err != nil {
		return etcdAccess{}, err
	}
	return etcdAccess{
		endpoint: "https://" + resources.ClientServiceName(c.Name) + "." + c.Namespace + ".svc:" + strconv.Itoa(resources.ClientPort),
		addr:     addr,
		tls:      &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}, nil
}

// client dials the access's address whatever the endpoint's name; nil if it cannot be made.
func (a etcdAccess) client() *clientv3.Client {
	return newEtcdClient(clientv3.Config{
		Endpoints: []string{a.endpoint}, TLS: a.tls, Username: a.user, Password: a.password,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", a.addr)
		})},
	})
}

// memberKeyspacesDiffer says how the members' keyspaces differ, or "" (etcdtest.KeyspacesDiffer),
// each member asked at its own pod IP. A member of a TLS cluster is asked at its DNS name, which
// its certificate carries and this machine cannot resolve, dialled at its pod IP, with a's TLS
// configuration and credentials.
func memberKeyspacesDiffer(ctx context.Context, c *etcdv1alpha1.EtcdCluster, a etcdAccess) string {
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil {
		return err.Error()
	}
	endpoints := map[string]string{} // member: the client URL it is asked at
	podAddrs := map[string]string{}  // a TLS member's host:port: its pod IP's
	for _, p := range pods.Items {
		if p.Status.PodIP == "" {
			return "pod " + p.Name + " has no IP yet"
		}
		member := p.Labels[resources.LabelMember]
		podAddr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(resources.ClientPort))
		if c.Spec.TLS == nil {
			endpoints[member] = "http://" + podAddr
			continue
		}
		hostPort := resources.MemberHostPort(c, member, resources.ClientPort)
		endpoints[member] = "https://" + hostPort
		podAddrs[hostPort] = podAddr
	}
	cfg := clientv3.Config{Endpoints: slices.Collect(maps.Values(endpoints)), TLS: a.tls, Username: a.user, Password: a.password}
	if c.Spec.TLS != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if podAddr, ok := podAddrs[addr]; ok {
				addr = podAddr
			}
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		})}
	}
	cl := newEtcdClient(cfg)
	if cl == nil {
		return "no etcd client for the members"
	}
	defer cl.Close()
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return etcdtest.KeyspacesDiffer(callCtx, cl, endpoints)
}

// podRecorder keeps the spec of every pod made in a namespace while the test runs: the pods of
// Jobs are gone by the time the test looks.
type podRecorder struct {
	mu   sync.Mutex
	pods map[string]corev1.Pod // by UID
	// nodes are the nodes pods were bound to, by UID.
	nodes map[string]string
}

func recordPods(t *testing.T, namespace string) *podRecorder {
	r := &podRecorder{pods: map[string]corev1.Pod{}, nodes: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := newClientset(t).CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			r.mu.Lock()
			if ev.Type == watch.Added {
				r.pods[string(pod.UID)] = *pod
			}
			if pod.Spec.NodeName != "" {
				r.nodes[string(pod.UID)] = pod.Spec.NodeName
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return r
}

// checkPods: every pod the operator made in the cell's namespace (members and agent Jobs)
// follows the cluster's pod template: its placement, and the pull secrets wherever it runs the
// etcd image.
func (m *matrixCell) checkPods(t *testing.T) {
	m.pods.mu.Lock()
	defer m.pods.mu.Unlock()
	checked := 0
	for _, pod := range m.pods.pods {
		if pod.Labels[resources.LabelManagedBy] != "etcd-operator" {
			continue // the test's own (the S3 server)
		}
		checked++
		spec := pod.Spec
		if m.cfg[matrix.Placement] == "template" {
			for k, v := range matrixNodeSelector {
				if spec.NodeSelector[k] != v {
					t.Errorf("pod %s has node selector %v: the pod template's %s=%s is missing", pod.Name, spec.NodeSelector, k, v)
				}
			}
			for _, tol := range matrixTolerations {
				if !slices.ContainsFunc(spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&tol) }) {
					t.Errorf("pod %s has tolerations %v: the pod template's %v is missing", pod.Name, spec.Tolerations, tol)
				}
			}
		}
		runsEtcd := slices.ContainsFunc(slices.Concat(spec.InitContainers, spec.Containers), func(c corev1.Container) bool {
			return strings.HasPrefix(c.Image, m.cluster.Spec.Repository+":")
		})
		if m.cfg[matrix.Repository] == "private" && runsEtcd && !slices.Contains(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: matrixPullSecret}) {
			t.Errorf("pod %s runs the private etcd image without the pull secret %s: %v", pod.Name, matrixPullSecret, spec.ImagePullSecrets)
		}
	}
	t.Logf("%d pods of the operator checked against the pod template", checked)
	if m.cfg[matrix.Nodes] == "two" {
		// Node-local volumes on two nodes are the point: members must have used both.
		memberNodes := map[string]int{}
		for uid, pod := range m.pods.pods {
			if pod.Labels[resources.LabelMember] != "" && pod.Labels[resources.LabelManagedBy] == "etcd-operator" && m.pods.nodes[uid] != "" &&
				pod.Labels[batchv1.JobNameLabel] == "" {
				memberNodes[m.pods.nodes[uid]]++
			}
		}
		if len(memberNodes) < 2 {
			t.Errorf("member pods ran on %v: want both nodes", memberNodes)
		}
		t.Logf("member pods by node: %v", memberNodes)
	}
}
