//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/internal/restoreplan"
	"github.com/etcd-database/etcd-operator/test/failpoints"
	"github.com/etcd-database/etcd-operator/test/linearizability"
)

// convergeTimeout bounds one operation of the walk, its crashes and restarts included.
const convergeTimeout = 8 * time.Minute

// The failpoint walk: one cluster's life — create, scale out and in, upgrade, backup, restore in
// place and into a new cluster — and a TLS cluster with root authentication — create, password
// change, certificate renewal — with the operator's failpoint build crashing at every step
// boundary test/failpoints lists. Each operation arms its failpoints as panics at once; the
// operator crashes at the first it crosses, is started again at once, armed with the rest, and
// goes on from what it observes. After each operation the cluster must have converged: Available
// with exactly spec.size voters, no member added twice, no pod of a member deleted while etcd
// still listed it, no orphan pod or claim, no acknowledged write lost, and the backup's and
// restores' status true to what happened; and what concurrent clients saw from the creation to
// the backup (scale-out, scale-in and upgrade, with their crashes) must be linearizable. A
// failpoint the operation did not reach fails it.
//
// E2E_FAILPOINT_OPERATIONS (a regexp) arms only the operations it matches; the others still run,
// as the later ones need them, without crashes.
func TestFailpointWalk(t *testing.T) {
	if os.Getenv("E2E_FAILPOINTS") == "" {
		t.Skip("needs the operator's failpoint build deployed: run with make test-failpoints")
	}
	armed, err := regexp.Compile(os.Getenv("E2E_FAILPOINT_OPERATIONS"))
	if err != nil {
		t.Fatalf("E2E_FAILPOINT_OPERATIONS: %v", err)
	}
	o := startFailpointOperator(t)
	w := &failpointWalk{walkT: t, operator: o, ns: testNamespace(t, "e2e-failpoints-")}
	steps := map[string]func(*testing.T){
		"create 3":                   w.create,
		"scale 3 to 5":               func(t *testing.T) { w.scale(t, 5, 2) },
		"scale 5 to 3":               func(t *testing.T) { w.scale(t, 3, 0) },
		"upgrade":                    w.upgrade,
		"backup":                     w.backup,
		"restore in place":           w.restoreInPlace,
		"restore into a new cluster": w.restoreNew,
		"create with TLS and auth":   w.createSecure,
		"change the root password":   w.changeRootPassword,
		"renew certificates":         w.renewCertificates,
		"rotate the CA":              w.rotateCA,
		"recover a lost quorum":      w.recoverLostQuorum,
		"restore a lost cluster from its latest backup": w.restoreLostCluster,
	}
	for _, op := range failpoints.Walk {
		if steps[op.Name] == nil {
			t.Fatalf("operation %q of test/failpoints has no step in the walk", op.Name)
		}
	}
	start := time.Now()
	var timings []string
	for _, op := range failpoints.Walk {
		crashesBefore, began := o.crashCount(), time.Now()
		arm := armed.MatchString(op.Name)
		ok := t.Run(op.Name, func(t *testing.T) {
			if arm {
				o.arm(t, op)
			}
			steps[op.Name](t)
			if arm {
				o.finish(t)
			}
			if err := o.failed(); err != nil {
				t.Fatal(err)
			}
		})
		timings = append(timings, fmt.Sprintf("  %-28s %3d crashes  %v", op.Name, o.crashCount()-crashesBefore, time.Since(began).Round(time.Second)))
		if !ok {
			break // the operations after it build on it
		}
	}
	t.Logf("the walk took %v:\n%s\ncrashes:\n%s", time.Since(start).Round(time.Second), strings.Join(timings, "\n"), o.summary())
}

// failpointWalk is what the walk's operations share.
type failpointWalk struct {
	// walkT is the whole walk's test, which owns what outlives an operation (the writer).
	walkT    *testing.T
	operator *failpointOperator
	ns       string

	// The cluster whose life the walk follows, its writer, the clients whose history is checked
	// for linearizability while it is scaled and upgraded, and its backup.
	cluster  *etcdv1alpha1.EtcdCluster
	writer   *writer
	clients  *linearizability.Workload
	s3       *s3Server
	backupOf *etcdv1alpha1.EtcdBackup
	// afterBackup is a key written after the backup, which no restore of it may bring back.
	afterBackup string

	// The TLS cluster with root authentication, and its root password.
	secure       *etcdv1alpha1.EtcdCluster
	rootSecret   *corev1.Secret
	rootPassword string
}

func (w *failpointWalk) create(t *testing.T) {
	w.cluster = &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "walk", Namespace: w.ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
		},
	}
	members := watchMembers(t, w.cluster, w.plainClient, true)
	if err := k8sClient.Create(context.Background(), w.cluster); err != nil {
		t.Fatal(err)
	}
	w.converged(t, w.cluster, 3, w.plainClient)
	members.expectAdded(t, 3)
	w.writer = startWriter(w.walkT, clientServiceEndpoint(t, w.cluster), "/walk")
	w.clients = startWorkload(w.walkT, clientServiceEndpoint(t, w.cluster))
	waitFor(t, "the writer's first acknowledged writes", func(context.Context) (bool, error) { return w.writer.ackedCount() > 10, nil })
}

func (w *failpointWalk) scale(t *testing.T, size int32, added int) {
	members := watchMembers(t, w.cluster, w.plainClient, true)
	patchSpec(t, w.cluster, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = size })
	w.converged(t, w.cluster, int(size), w.plainClient)
	members.expectAdded(t, added)
	w.noAckedWriteLost(t)
}

func (w *failpointWalk) upgrade(t *testing.T) {
	// An upgrade restarts each member in turn, evicting its pod (through the budget) and making
	// it again on the new version: a roll-out, whose pod deletions are the point.
	members := watchMembers(t, w.cluster, w.plainClient, false)
	patchSpec(t, w.cluster, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Version = etcdNextVersion })
	w.waitCluster(t, w.cluster, "every member on "+etcdNextVersion, func(c *etcdv1alpha1.EtcdCluster) bool {
		return c.Status.CurrentVersion == etcdNextVersion
	})
	w.converged(t, w.cluster, 3, w.plainClient)
	members.expectAdded(t, 0)
	w.noAckedWriteLost(t)
}

// backup takes a one-shot backup to S3 once the writer and the clients have stopped, so that
// every acknowledged write is in it. What the clients saw through the scale-out, scale-in and
// upgrade, crashes included, must be linearizable.
func (w *failpointWalk) backup(t *testing.T) {
	ctx := context.Background()
	w.writer.verify(t)
	checkLinearizable(t, w.clients)
	w.s3 = startS3Server(t, w.ns)
	w.s3.createBucket(t, backupBucket)
	w.backupOf = &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "walk", Namespace: w.ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: w.cluster.Name, Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: backupBucket, Prefix: "walk/", Endpoint: w.s3.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
			CredentialsSecretName: w.s3.CredentialsSecret,
		}}},
	}
	if err := k8sClient.Create(ctx, w.backupOf); err != nil {
		t.Fatal(err)
	}
	b := w.backupOf
	waitBackupPhase(t, b, convergeTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	// What status says happened: one run, completed, and its snapshot in the bucket as recorded.
	if b.Status.Phase != etcdv1alpha1.BackupCompleted || len(b.Status.History) != 1 || b.Status.History[0].Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup status %+v: want one completed run", b.Status)
	}
	if !meta.IsStatusConditionTrue(b.Status.Conditions, etcdv1alpha1.ConditionSucceeded) || b.Status.ActiveJob != "" {
		t.Errorf("backup conditions %+v, active Job %q: want Succeeded and no Job running", b.Status.Conditions, b.Status.ActiveJob)
	}
	art := b.Status.LastBackup
	keys := w.s3.listSnapshots(t, backupBucket, "walk/")
	if art == nil || len(keys) != 1 || "s3://"+backupBucket+"/"+keys[0] != art.URI {
		t.Fatalf("objects %v in the bucket, status says %+v: want exactly the recorded snapshot", keys, art)
	}
	snapshot := w.s3.getObject(t, backupBucket, keys[0])
	sum := sha256.Sum256(snapshot)
	if hex.EncodeToString(sum[:]) != art.SHA256 || int64(len(snapshot)) != art.SizeBytes {
		t.Fatalf("the snapshot has %d bytes, sha256 %x; status says %d bytes, sha256 %s", len(snapshot), sum, art.SizeBytes, art.SHA256)
	}
	w.jobsGone(t, client.MatchingLabels{resources.LabelBackup: b.Name})
	// Written after the snapshot: a restore of it must not have it.
	w.afterBackup = "/walk-after-backup"
	cl := plainClient(w.cluster)
	if cl == nil {
		t.Fatal("no client for the cluster")
	}
	defer cl.Close()
	if _, err := cl.Put(ctx, w.afterBackup, "x"); err != nil {
		t.Fatal(err)
	}
}

func (w *failpointWalk) restoreInPlace(t *testing.T) {
	ctx := context.Background()
	before := &etcdv1alpha1.EtcdCluster{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(w.cluster), before); err != nil {
		t.Fatal(err)
	}
	members := watchMembers(t, w.cluster, w.plainClient, false)
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "in-place", Namespace: w.ns},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: w.backupOf.Name}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: w.cluster.Name},
		},
	}
	if err := k8sClient.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	w.waitRestored(t, rs)
	if rs.Status.Replaced == nil || rs.Status.Replaced.ClusterID != before.Status.ClusterID || len(rs.Status.Replaced.Members) != 3 {
		t.Errorf("status.replaced %+v, want cluster %s and its 3 members", rs.Status.Replaced, before.Status.ClusterID)
	}
	w.converged(t, w.cluster, 3, w.plainClient)
	if w.cluster.Status.ClusterID == before.Status.ClusterID {
		t.Errorf("the cluster still has ID %s: it was not restored", before.Status.ClusterID)
	}
	for _, m := range w.cluster.Status.Members {
		if slices.ContainsFunc(before.Status.Members, func(old etcdv1alpha1.MemberStatus) bool { return old.Name == m.Name }) {
			t.Errorf("old member %s is in the restored cluster", m.Name)
		}
	}
	// The hold goes in the cleanup after the outcome is recorded.
	w.waitCluster(t, w.cluster, "no annotation of the restore left", func(c *etcdv1alpha1.EtcdCluster) bool { return len(c.Annotations) == 0 })
	members.expectFinalAllNew(t, before)
	w.expectBackedUpData(t, w.cluster, deref(rs.Status.RestoredRevision)+rs.Status.RevisionBump)
}

func (w *failpointWalk) restoreNew(t *testing.T) {
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: w.ns},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: w.backupOf.Name}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "walk-copy", Cluster: &etcdv1alpha1.EtcdClusterSpec{
				Size: 1, Version: etcdNextVersion,
				Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			}},
		},
	}
	if err := k8sClient.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	w.waitRestored(t, rs)
	restored := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "walk-copy", Namespace: w.ns}}
	w.converged(t, restored, 1, func() *clientv3.Client { return plainClient(restored) })
	w.expectBackedUpData(t, restored, deref(rs.Status.RestoredRevision)+rs.Status.RevisionBump)
}

// waitRestored waits for the restore to complete and checks what its status and the objects it
// made say: the snapshot of the backup at its revision, and nothing of the restore left behind.
func (w *failpointWalk) waitRestored(t *testing.T, rs *etcdv1alpha1.EtcdRestore) {
	t.Helper()
	waitRestorePhase(t, rs, convergeTimeout)
	art := w.backupOf.Status.LastBackup
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || !meta.IsStatusConditionTrue(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded) {
		t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
	}
	if rs.Status.SnapshotURI != art.URI || rs.Status.SnapshotSHA256 != art.SHA256 || deref(rs.Status.RestoredRevision) != art.Revision || rs.Status.CompletionTime == nil {
		t.Errorf("restore status %+v; want revision %d of %s (sha256 %s) and a completion time", rs.Status, art.Revision, art.URI, art.SHA256)
	}
	if rs.Status.RevisionBump < restoreplan.MinAutoBump {
		t.Errorf("restore status %+v: bumped by %d, want the revision bumped (spec.revisionBump Auto)", rs.Status, rs.Status.RevisionBump)
	}
	w.jobsGone(t, client.MatchingLabels{resources.LabelRestore: rs.Name})
}

// expectBackedUpData checks that the restored cluster serves the backup: every write the writer
// had acknowledged, nothing written after the backup, at the snapshot's revision bumped.
func (w *failpointWalk) expectBackedUpData(t *testing.T, c *etcdv1alpha1.EtcdCluster, revision int64) {
	t.Helper()
	cl := plainClient(c)
	if cl == nil {
		t.Fatalf("no client for EtcdCluster %s", c.Name)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, w.writer.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != revision {
		t.Errorf("the restored keyspace is at revision %d, want %d (the snapshot's, bumped)", resp.Header.Revision, revision)
	}
	present := map[string]bool{}
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = string(kv.Value) == string(kv.Key)
	}
	w.writer.mu.Lock()
	acked := slices.Clone(w.writer.acked)
	w.writer.mu.Unlock()
	var lost []string
	for _, key := range acked {
		if !present[key] {
			lost = append(lost, key)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged writes are not in the restored cluster, first %v", len(lost), len(acked), lost[:min(5, len(lost))])
	}
	after, err := cl.Get(ctx, w.afterBackup)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Kvs) != 0 {
		t.Errorf("%s, written after the backup, is in the restored cluster", w.afterBackup)
	}
}

// createSecure creates a TLS cluster with root authentication. Its certificates are renewed 90s
// after they are issued (and then every 90s), for the renewal operation to come soon.
func (w *failpointWalk) createSecure(t *testing.T) {
	ctx := context.Background()
	w.rootPassword = walkFirstPassword
	w.rootSecret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: w.ns},
		StringData: map[string]string{"password": w.rootPassword},
	}
	if err := k8sClient.Create(ctx, w.rootSecret); err != nil {
		t.Fatal(err)
	}
	w.secure = &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: w.ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS: &etcdv1alpha1.TLSSpec{
				Validity:    &metav1.Duration{Duration: 6 * time.Minute},
				RenewBefore: &metav1.Duration{Duration: 4*time.Minute + 30*time.Second},
			},
			Auth: &etcdv1alpha1.AuthSpec{RootSecretName: w.rootSecret.Name},
		},
	}
	members := watchMembers(t, w.secure, w.secureClient, true)
	if err := k8sClient.Create(ctx, w.secure); err != nil {
		t.Fatal(err)
	}
	w.converged(t, w.secure, 3, w.secureClient)
	members.expectAdded(t, 3)
	w.authSettled(t)
}

func (w *failpointWalk) changeRootPassword(t *testing.T) {
	old := w.rootPassword
	w.rootPassword = walkSecondPassword
	w.rootSecret.StringData = map[string]string{"password": w.rootPassword}
	if err := k8sClient.Update(context.Background(), w.rootSecret); err != nil {
		t.Fatal(err)
	}
	w.authSettled(t)
	if err := w.securePut(t, old); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("the old root password after the change: %v, want authentication failed", err)
	}
	w.converged(t, w.secure, 3, w.secureClient)
}

func (w *failpointWalk) rotateCA(t *testing.T) {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+etcdv1alpha1.AnnotationRotateCA+`":"walk"}}}`))
	if err := k8sClient.Patch(context.Background(), w.secure, patch); err != nil {
		t.Fatal(err)
	}
	w.waitCluster(t, w.secure, "the CA rotation done", func(c *etcdv1alpha1.EtcdCluster) bool {
		return c.Status.CARotation != nil && c.Status.CARotation.Phase == "Done"
	})
	w.converged(t, w.secure, 3, w.secureClient)
	ca := &corev1.Secret{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: resources.CASecretName(w.secure.Name)}, ca); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ca.Data["tls.crt"])
	if block == nil {
		t.Fatal("no CA certificate in its Secret")
	}
	if sum := sha256.Sum256(block.Bytes); hex.EncodeToString(sum[:]) != w.secure.Status.CARotation.NewCA {
		t.Errorf("the CA Secret holds %x, status.caRotation.newCA says %s", sum, w.secure.Status.CARotation.NewCA)
	}
	if err := w.securePut(t, w.rootPassword); err != nil {
		t.Errorf("root with the client certificate of the new CA was refused: %v", err)
	}
	if err := k8sClient.Delete(context.Background(), w.secure); err != nil {
		t.Errorf("delete the TLS cluster, which renews its certificates every 90s: %v", err)
	}
}

func (w *failpointWalk) renewCertificates(t *testing.T) {
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(w.secure), w.secure); err != nil {
		t.Fatal(err)
	}
	issued := map[string]time.Time{}
	for _, cs := range w.secure.Status.Certificates {
		if cs.Name != "ca" && cs.NotAfter != nil {
			issued[cs.Name] = cs.NotAfter.Time
		}
	}
	if len(issued) != 3 {
		t.Fatalf("status.certificates %+v: want peer, server and client", w.secure.Status.Certificates)
	}
	w.waitCluster(t, w.secure, "every certificate renewed", func(c *etcdv1alpha1.EtcdCluster) bool {
		renewed := 0
		for _, cs := range c.Status.Certificates {
			if first, ok := issued[cs.Name]; ok && cs.NotAfter != nil && cs.NotAfter.After(first) {
				renewed++
			}
		}
		return renewed == len(issued)
	})
	w.converged(t, w.secure, 3, w.secureClient)
	if err := w.securePut(t, w.rootPassword); err != nil {
		t.Errorf("root with the renewed client certificate was refused: %v", err)
	}
}

// authSettled waits until etcd has authentication on with the walk's root password, refusing
// any other, and the operator's record of it holds that password alone.
func (w *failpointWalk) authSettled(t *testing.T) {
	t.Helper()
	w.waitFor(t, "authentication on with the root password of the Secret", func(ctx context.Context) (bool, error) {
		wrong := w.securePut(t, "wrong-password")
		return wrong != nil && strings.Contains(wrong.Error(), "authentication failed") && w.securePut(t, w.rootPassword) == nil, nil
	})
	record := &corev1.Secret{}
	w.waitFor(t, "the operator's record of the root password", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: resources.RootCredentialsSecretName(w.secure.Name)}, record)
		return err == nil && string(record.Data[resources.RootPasswordKey]) == w.rootPassword && len(record.Data[resources.RootPendingPasswordKey]) == 0, nil
	})
}

func (w *failpointWalk) securePut(t *testing.T, password string) error {
	endpoint, addr, tlsConfig, err := w.secureEndpoint()
	if err != nil {
		return err
	}
	return putErr(context.Background(), endpoint, addr, tlsConfig, "root", password)
}

// secureEndpoint is the TLS cluster's client Service: its name, which the server certificate
// carries, the cluster IP it is reached at, and a client configuration from the operator's
// client certificate Secret, read afresh (it is renewed).
func (w *failpointWalk) secureEndpoint() (string, string, *tls.Config, error) {
	ctx := context.Background()
	secret, svc := &corev1.Secret{}, &corev1.Service{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: resources.TLSSecrets(w.secure).Client}, secret); err != nil {
		return "", "", nil, err
	}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: resources.ClientServiceName(w.secure.Name)}, svc); err != nil {
		return "", "", nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data["ca.crt"])
	pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
	if err != nil {
		return "", "", nil, err
	}
	endpoint := resources.ClientServiceName(w.secure.Name) + "." + w.ns + ".svc:2379"
	addr := net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(resources.ClientPort))
	return endpoint, addr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// recoverLostQuorum loses two of the cluster's three members for good and has the operator
// recover it from the survivor: every key is still there, and the recovery is on record. The
// recovery is the one a person starts with recover-from (policy Manual): its steps are those of
// policy ForceNewCluster, less the wait of quorumLossRecovery.after (2 minutes at least), in
// which no failpoint lies; the e2e suite covers that wait.
func (w *failpointWalk) recoverLostQuorum(t *testing.T) {
	before := w.keyspace(t)
	patchSpec(t, w.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryManual}
	})
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(w.cluster), w.cluster); err != nil {
		t.Fatal(err)
	}
	lost := loseMembers(t, w.cluster, 2, claimsGone)
	survivors := slices.DeleteFunc(memberNames(w.cluster), func(n string) bool { return slices.Contains(lost, n) })
	var survivor string
	w.waitCluster(t, w.cluster, "a recovery offered from the survivor", func(c *etcdv1alpha1.EtcdCluster) bool {
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		for _, s := range survivors {
			if d != nil && d.Reason == etcdv1alpha1.ReasonQuorumLost && strings.Contains(d.Message, etcdv1alpha1.AnnotationRecoverFrom+"="+s) {
				survivor = s
			}
		}
		return survivor != ""
	})
	annotate(t, w.cluster, etcdv1alpha1.AnnotationRecoverFrom, survivor)
	w.waitCluster(t, w.cluster, "the lost quorum recovered", func(c *etcdv1alpha1.EtcdCluster) bool {
		qr := c.Status.QuorumRecovery
		return qr != nil && qr.CompletionTime != nil && qr.PreservedData != nil && slices.Equal(qr.LostMembers, lost)
	})
	w.converged(t, w.cluster, 3, w.plainClient)
	copyClaim := &corev1.PersistentVolumeClaim{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: resources.QuorumRecoveryClaimName(w.cluster.Name)}, copyClaim); err != nil {
		t.Errorf("the claim holding the copy of the survivor's data: %v", err)
	}
	after := w.keyspace(t)
	for key, value := range before {
		if after[key] != value {
			t.Errorf("key %s: %q before the loss, %q after the recovery", key, value, after[key])
		}
	}
	t.Logf("%d keys before the loss, %d after the recovery", len(before), len(after))
}

// restoreLostCluster loses every member of the cluster for good and lets the operator restore
// it in place from the newest snapshot of its backups: the backup's data at its revision,
// bumped, the recovery and its restore on record.
func (w *failpointWalk) restoreLostCluster(t *testing.T) {
	ctx := context.Background()
	patchSpec(t, w.cluster, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{
			Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup, After: &metav1.Duration{Duration: membership.MinRecoveryAfter}}
	})
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(w.cluster), w.cluster); err != nil {
		t.Fatal(err)
	}
	lost := loseMembers(t, w.cluster, 3, claimsGone)
	w.waitCluster(t, w.cluster, "the lost cluster restored from its backup", func(c *etcdv1alpha1.EtcdCluster) bool {
		qr := c.Status.QuorumRecovery
		return qr != nil && qr.Backup != nil && qr.CompletionTime != nil && slices.Equal(qr.LostMembers, lost)
	})
	qr, art := w.cluster.Status.QuorumRecovery, w.backupOf.Status.LastBackup
	if qr.Member != "" || qr.Backup.EtcdBackup != w.backupOf.Name || qr.Backup.SnapshotURI != art.URI || qr.Backup.Revision != art.Revision {
		t.Errorf("status.quorumRecovery %+v, backup %+v: want a recovery from %s's snapshot %s at revision %d", *qr, *qr.Backup, w.backupOf.Name, art.URI, art.Revision)
	}
	rs := &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: qr.Backup.EtcdRestore}}
	w.waitRestored(t, rs)
	w.converged(t, w.cluster, 3, w.plainClient)
	w.expectBackedUpData(t, w.cluster, deref(rs.Status.RestoredRevision)+rs.Status.RevisionBump)
}

// keyspace is every key of the cluster with its value, read linearizably.
func (w *failpointWalk) keyspace(t *testing.T) map[string]string {
	t.Helper()
	cl := w.plainClient()
	if cl == nil {
		t.Fatal("no client of the cluster")
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func (w *failpointWalk) plainClient() *clientv3.Client { return plainClient(w.cluster) }

// secureClient is a client of the TLS cluster, as root once authentication is on; nil while
// its Service or certificates do not exist yet.
func (w *failpointWalk) secureClient() *clientv3.Client {
	endpoint, addr, tlsConfig, err := w.secureEndpoint()
	if err != nil {
		return nil
	}
	return newEtcdClient(clientv3.Config{
		Endpoints: []string{"https://" + endpoint}, TLS: tlsConfig, Username: "root", Password: w.rootPassword,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		})},
	})
}

// plainClient is a client of a cluster without TLS through its client Service's cluster IP;
// nil while the Service does not exist yet.
func plainClient(c *etcdv1alpha1.EtcdCluster) *clientv3.Client {
	svc := &corev1.Service{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: resources.ClientServiceName(c.Name)}, svc); err != nil {
		return nil
	}
	return newEtcdClient(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, resources.ClientPort)}})
}

func newEtcdClient(cfg clientv3.Config) *clientv3.Client {
	cfg.DialTimeout, cfg.Logger = 3*time.Second, zap.NewNop()
	cl, err := clientv3.New(cfg)
	if err != nil {
		return nil
	}
	return cl
}

// noAckedWriteLost checks, with the writer still writing, that every write it had acknowledged
// is there.
func (w *failpointWalk) noAckedWriteLost(t *testing.T) {
	t.Helper()
	w.writer.mu.Lock()
	acked := slices.Clone(w.writer.acked)
	w.writer.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := w.writer.client.Get(ctx, w.writer.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = string(kv.Value) == string(kv.Key)
	}
	for _, key := range acked {
		if !present[key] {
			t.Fatalf("acknowledged write %s lost (%d acknowledged so far)", key, len(acked))
		}
	}
	t.Logf("%d acknowledged writes so far, none lost", len(acked))
}

// waitFor polls done until it holds, failing early if the operator could not be restarted.
func (w *failpointWalk) waitFor(t *testing.T, what string, done func(context.Context) (bool, error)) {
	t.Helper()
	err := pollUntil(context.Background(), convergeTimeout, func(ctx context.Context) (bool, error) {
		if err := w.operator.failed(); err != nil {
			return false, err
		}
		return done(ctx)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (w *failpointWalk) waitCluster(t *testing.T, c *etcdv1alpha1.EtcdCluster, what string, done func(*etcdv1alpha1.EtcdCluster) bool) {
	t.Helper()
	w.waitFor(t, c.Name+": "+what, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && done(c), nil
	})
}

// converged waits until the cluster is Available with exactly size healthy voters and status
// agrees with itself, then checks etcd and the Kubernetes objects against it: etcd lists exactly
// those members, all started voters, and each has one pod and one claim, with no other pod or
// claim of the cluster left.
func (w *failpointWalk) converged(t *testing.T, c *etcdv1alpha1.EtcdCluster, size int, connect func() *clientv3.Client) {
	t.Helper()
	w.waitCluster(t, c, fmt.Sprintf("Available with %d voters", size), func(c *etcdv1alpha1.EtcdCluster) bool { return isAvailable(c, size) })
	w.operator.waitRunning(t)
	var why string
	w.waitFor(t, c.Name+": etcd, pods and claims match, every member's data the same", func(ctx context.Context) (bool, error) {
		why = membersMatch(ctx, c, size, connect, nil)
		if why == "" {
			why = w.hashesDiffer(ctx, c)
		}
		return why == "", nil
	})
	if why != "" {
		t.Fatal(why)
	}
}

// membersMatch says how etcd's members, the pods and the claims of the cluster differ from
// exactly size started voters with one pod and claim each, or "".
//
// kept are claims an earlier quorum recovery kept on purpose: the record of a later recovery
// names only the members it did without itself.
func membersMatch(ctx context.Context, c *etcdv1alpha1.EtcdCluster, size int, connect func() *clientv3.Client, kept map[string]bool) string {
	cl := connect()
	if cl == nil {
		return "no etcd client"
	}
	defer cl.Close()
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cl.MemberList(callCtx)
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, m := range resp.Members {
		if m.IsLearner || m.Name == "" {
			return fmt.Sprintf("etcd lists %v: a learner or a member that never started", resp.Members)
		}
		names = append(names, m.Name)
	}
	if len(names) != size {
		return fmt.Sprintf("etcd lists %d members %v, want %d", len(names), names, size)
	}
	selector := client.MatchingLabels{resources.LabelCluster: c.Name}
	pods, claims := &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(c.Namespace), selector); err != nil {
		return err.Error()
	}
	if err := k8sClient.List(ctx, claims, client.InNamespace(c.Namespace)); err != nil {
		return err.Error()
	}
	var podNames, claimNames []string
	for _, p := range pods.Items {
		podNames = append(podNames, p.Name)
	}
	for _, pvc := range claims.Items {
		if pvc.Name == resources.QuorumRecoveryClaimName(c.Name) {
			// The copy of a quorum recovery's survivor, kept on purpose (docs/concepts.md);
			// the recovery operation checks it.
			continue
		}
		if qr := c.Status.QuorumRecovery; pvc.Labels["etcd.database.dev/retained-from"] == c.Name &&
			(qr != nil && slices.Contains(qr.LostMembers, pvc.Labels[resources.LabelMember]) || kept[pvc.Name]) {
			// Kept on purpose: a member the recovery did without (a survivor not chosen, say)
			// may hold writes the cluster lacks (docs/concepts.md).
			continue
		}
		// Every claim of the cluster: labelled as a member's, kept from one, or named as one
		// (a claim a restore staged).
		if pvc.Labels[resources.LabelCluster] == c.Name || pvc.Labels["etcd.database.dev/retained-from"] == c.Name ||
			memberClaimName(c.Name).MatchString(pvc.Name) {
			claimNames = append(claimNames, pvc.Name)
		}
	}
	var wantClaims []string
	for _, n := range names {
		wantClaims = append(wantClaims, resources.PVCName(n))
	}
	slices.Sort(names)
	slices.Sort(podNames)
	slices.Sort(claimNames)
	slices.Sort(wantClaims)
	if !slices.Equal(podNames, names) || !slices.Equal(claimNames, wantClaims) {
		return fmt.Sprintf("members %v, pods %v, claims %v: orphans or missing objects", names, podNames, claimNames)
	}
	return ""
}

// hashesDiffer says how the members' keyspaces differ, or "" (memberKeyspacesDiffer), with the
// operator's client certificate (root's, with authentication on) for the TLS cluster.
func (w *failpointWalk) hashesDiffer(ctx context.Context, c *etcdv1alpha1.EtcdCluster) string {
	var a etcdAccess
	if c.Spec.TLS != nil {
		_, _, tlsConfig, err := w.secureEndpoint()
		if err != nil {
			return "the client certificate: " + err.Error()
		}
		a.tls = tlsConfig
	}
	return memberKeyspacesDiffer(ctx, c, a)
}

// memberClaimName matches the claims of the cluster's members (resources.NewMemberName).
func memberClaimName(cluster string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(resources.PVCName(cluster+"-")) + "[bcdfghjklmnpqrstvwxz2456789]{5}$")
}

// jobsGone waits until the Jobs of the selector are gone: a finished run's Job is deleted once
// its outcome is recorded.
func (w *failpointWalk) jobsGone(t *testing.T, selector client.MatchingLabels) {
	t.Helper()
	w.waitFor(t, fmt.Sprintf("the Jobs %v deleted", selector), func(ctx context.Context) (bool, error) {
		jobs := &batchv1.JobList{}
		err := k8sClient.List(ctx, jobs, client.InNamespace(w.ns), selector)
		return err == nil && len(jobs.Items) == 0, nil
	})
}

// memberWatch records, while an operation runs, every member ID etcd lists and, with
// checkDeletes, each member pod deleted while etcd still listed its member: the operator
// removes a member from etcd before it deletes the member's pod, and deletes no voter's pod
// otherwise outside an in-place restore or a roll-out (an upgrade is one).
type memberWatch struct {
	namespace  string
	mu         sync.Mutex
	initial    map[uint64]string
	seen       map[uint64]string
	violations []string
	stop       chan struct{}
	done       chan struct{}
}

func watchMembers(t *testing.T, c *etcdv1alpha1.EtcdCluster, connect func() *clientv3.Client, checkDeletes bool) *memberWatch {
	t.Helper()
	m := &memberWatch{namespace: c.Namespace, initial: map[uint64]string{}, seen: map[uint64]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	var cl *clientv3.Client
	list := func(ctx context.Context) (*clientv3.MemberListResponse, error) {
		if cl == nil {
			if cl = connect(); cl == nil {
				return nil, fmt.Errorf("no client yet")
			}
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := cl.MemberList(ctx)
		if err != nil {
			// Dialled again next time: a client that failed while the cluster formed can sit in
			// its reconnect backoff past the operation's end (a walk run once saw no member
			// of a bootstrap at all).
			cl.Close()
			cl = nil
		}
		return resp, err
	}
	ctx := context.Background()
	if c.Status.ClusterID != "" {
		// The cluster serves: what it has now is what the operation starts from.
		var resp *clientv3.MemberListResponse
		err := pollUntil(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			var err error
			resp, err = list(ctx)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("list the members of %s: %v", c.Name, err)
		}
		for _, mem := range resp.Members {
			m.initial[mem.ID], m.seen[mem.ID] = mem.Name, mem.Name
		}
	}
	go func() {
		defer close(m.done)
		defer func() {
			if cl != nil {
				cl.Close()
			}
		}()
		checked := map[string]bool{}
		for {
			select {
			case <-m.stop:
				// A last look, so that the members the operation ends with are seen even if
				// every list during it failed.
				if resp, err := list(ctx); err == nil {
					m.mu.Lock()
					m.record(resp)
					m.mu.Unlock()
				}
				return
			case <-time.After(300 * time.Millisecond):
			}
			var deleted []string
			if checkDeletes {
				pods := &corev1.PodList{}
				if err := k8sClient.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil {
					continue
				}
				for _, p := range pods.Items {
					if p.DeletionTimestamp != nil && !checked[string(p.UID)] {
						checked[string(p.UID)] = true
						deleted = append(deleted, p.Name)
					}
				}
			}
			// Listed after the pods: a member removed before its pod was deleted is gone here.
			resp, err := list(ctx)
			if err != nil {
				continue
			}
			m.mu.Lock()
			m.record(resp)
			for _, pod := range deleted {
				for _, mem := range resp.Members {
					if mem.Name == pod {
						m.violations = append(m.violations, fmt.Sprintf("pod %s was deleted while etcd still listed its member", pod))
					}
				}
			}
			m.mu.Unlock()
		}
	}()
	t.Cleanup(m.end)
	return m
}

func (m *memberWatch) end() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// expectAdded checks that the operation added exactly n members to etcd — none twice — and
// deleted no member's pod before etcd had removed the member.
// record notes the members listed, keeping a started member's name; m.mu is held.
func (m *memberWatch) record(resp *clientv3.MemberListResponse) {
	for _, mem := range resp.Members {
		if _, ok := m.seen[mem.ID]; !ok || mem.Name != "" {
			m.seen[mem.ID] = mem.Name
		}
	}
}

func (m *memberWatch) expectAdded(t *testing.T, n int) {
	t.Helper()
	m.end()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Error(v)
	}
	var added []string
	for id, name := range m.seen {
		if _, ok := m.initial[id]; !ok {
			added = append(added, fmt.Sprintf("%x (%s)", id, name))
		}
	}
	if len(added) != n {
		t.Errorf("etcd gained %d members during the operation, %v; want %d: a member was added twice, or one too few", len(added), added, n)
		logEvents(t, m.namespace)
	}
}

// logEvents logs the namespace's events in time order: the operator's steps, for a failure
// to be read after the cluster is gone.
func logEvents(t *testing.T, namespace string) {
	t.Helper()
	events := &corev1.EventList{}
	if err := k8sClient.List(context.Background(), events, client.InNamespace(namespace)); err != nil {
		t.Logf("list the events of %s: %v", namespace, err)
		return
	}
	slices.SortFunc(events.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	var lines []string
	for _, e := range events.Items {
		lines = append(lines, fmt.Sprintf("%s %s %s/%s %s: %s", eventTime(e).UTC().Format("15:04:05.000"), e.Type,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message))
	}
	t.Logf("events in %s:\n%s", namespace, strings.Join(lines, "\n"))
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// expectFinalAllNew checks, after an in-place restore, that no member of the old cluster is in
// the new one and that the new one gained exactly its size in members.
func (m *memberWatch) expectFinalAllNew(t *testing.T, before *etcdv1alpha1.EtcdCluster) {
	t.Helper()
	m.end()
	m.mu.Lock()
	defer m.mu.Unlock()
	var added int
	for id := range m.seen {
		if _, ok := m.initial[id]; !ok {
			added++
		}
	}
	if added != int(before.Spec.Size) {
		t.Errorf("etcd listed %d new members during the restore, want %d (the restored member and the ones that joined it)", added, before.Spec.Size)
	}
}
