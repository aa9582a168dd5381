package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// The verify Job's two agent containers, run whole as the Job runs them: configured by the
// JSON in their environment, with the pod's paths in directories of the test, and read back
// through their exit code and termination message, as the operator reads them.

// runAsJob runs an agent entry point with cfg as its Job's configuration and the claim mounted
// at claim, and returns its exit code and report. The scratch directory, an emptyDir in the
// pod, is there before the agent starts.
func runAsJob(t *testing.T, run func(context.Context) int, cfg jobspec.JobConfig, claim, scratch string) (int, agent.Report) {
	t.Helper()
	return runInPod(t, run, cfg, agent.PodPaths{Claim: claim, VerifyScratch: scratch})
}

// runInPod runs an agent entry point with cfg as its configuration and the pod's paths where
// paths puts them, and returns its exit code and report.
func runInPod(t *testing.T, run func(context.Context) int, cfg jobspec.JobConfig, paths agent.PodPaths) (int, agent.Report) {
	t.Helper()
	return startInPod(t, run, cfg, paths)()
}

// startInPod starts an agent entry point as runInPod runs it, and returns the wait for its exit
// code and report.
func startInPod(t *testing.T, run func(context.Context) int, cfg jobspec.JobConfig, paths agent.PodPaths) func() (int, agent.Report) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(jobspec.ConfigEnv, string(raw))
	paths.TerminationMessage = filepath.Join(t.TempDir(), "termination-log")
	agent.UsePodPaths(t, paths)
	exit := make(chan int, 1)
	go func() { exit <- run(t.Context()) }()
	return func() (int, agent.Report) {
		t.Helper()
		code := <-exit
		msg, err := os.ReadFile(paths.TerminationMessage)
		if err != nil {
			t.Fatalf("no termination message: %v", err)
		}
		report, err := agent.DecodeReport(string(msg))
		if err != nil {
			t.Fatal(err)
		}
		return code, report
	}
}

// fetchedSnapshot is the sha256 of the snapshot in the scratch directory, "" if none is there.
func fetchedSnapshot(t *testing.T, scratch string) string {
	t.Helper()
	file := filepath.Join(scratch, filepath.Base(jobspec.VerifySnapshot))
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fileSHA256(t, file)
}

// A verify Job's fetch takes the snapshot from a bucket into the scratch directory, clearing
// what an earlier attempt left there, when its sha256 is the recorded one. Changed in the
// bucket since, its sha256 differs: the fetch fails for good, reports the snapshot
// unrestorable with both digests, and leaves nothing to restore.
func TestVerifyFetchFromABucketHoldsTheObjectToItsSHA256(t *testing.T) {
	srv, _, res := backUpCluster(t, 1, 20)
	cfg := fetchFromBucket(t, srv, res, res.SHA256)
	scratch := t.TempDir()
	leftover := filepath.Join(scratch, "data")
	if err := os.MkdirAll(leftover, 0o700); err != nil {
		t.Fatal(err)
	}

	code, report := runAsJob(t, agent.RunVerifyFetch, cfg, t.TempDir(), scratch)
	if code != 0 || report.Error != "" {
		t.Fatalf("fetch of the snapshot as uploaded: exit %d, %+v", code, report)
	}
	if got := report.Restore; got == nil || got.URI != res.URI || got.SHA256 != res.SHA256 || got.Revision != res.Revision {
		t.Fatalf("fetch reported %+v, the backup %+v", got, res)
	}
	if got := fetchedSnapshot(t, scratch); got != res.SHA256 {
		t.Fatalf("the scratch directory holds a snapshot with sha256 %q, want %s", got, res.SHA256)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("what an earlier attempt left in the scratch directory is still there: %v", err)
	}
	// The restored member's TLS material, made for the pod, the keys readable by its user alone.
	tlsDir := filepath.Join(scratch, jobspec.VerifyTLSSubdir)
	if _, err := agent.VerifyClientTLS(tlsDir); err != nil {
		t.Errorf("no client certificate for the verifier after the fetch: %v", err)
	}
	for _, key := range []string{jobspec.VerifyServerKeyFile, jobspec.VerifyClientKeyFile} {
		if fi, err := os.Stat(filepath.Join(tlsDir, key)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want it there, 0600", key, err, fi)
		}
	}

	object := filepath.Join(srv.Root, strings.TrimPrefix(res.URI, "s3://"))
	data, err := os.ReadFile(object)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(object, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, report = runAsJob(t, agent.RunVerifyFetch, cfg, t.TempDir(), scratch)
	if code != jobspec.ExitPermanent || !report.Permanent || !report.Unrestorable {
		t.Fatalf("fetch of an object changed in the bucket: exit %d, %+v; want it failed for good as unrestorable", code, report)
	}
	if want := fmt.Sprintf("not the recorded %s", res.SHA256); !strings.Contains(report.Error, want) || !strings.Contains(report.Error, res.URI) {
		t.Errorf("the report says %q; want it to name %s and say %q", report.Error, res.URI, want)
	}
	if report.Restore != nil {
		t.Errorf("a refused snapshot reported as fetched: %+v", report.Restore)
	}
	if got := fetchedSnapshot(t, scratch); got != "" {
		t.Errorf("a refused snapshot (sha256 %s) left in the scratch directory", got)
	}
}

// A verify Job's fetch reads a snapshot on a claim, under the claim's subpath, and reports it by
// the URI the backup gave it.
func TestVerifyFetchFromAClaim(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	raw := servers[0].Client(t)
	for i := range 20 {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	claim := t.TempDir()
	location := etcdv1alpha1.PVCLocation{ClaimName: "backups", SubPath: "etcd/main"}
	dest, err := storage.OpenDir(filepath.Join(claim, "etcd", "main"), agent.ClaimURIBase(&location))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}

	scratch := t.TempDir()
	cfg := jobspec.JobConfig{
		Storage: etcdv1alpha1.StorageLocation{PVC: &location},
		Key:     strings.TrimPrefix(res.URI, "pvc://backups/etcd/main/"), SHA256: res.SHA256,
	}
	code, report := runAsJob(t, agent.RunVerifyFetch, cfg, claim, scratch)
	if code != 0 || report.Error != "" {
		t.Fatalf("fetch from a claim: exit %d, %+v", code, report)
	}
	if got := report.Restore; got == nil || got.URI != res.URI || got.SHA256 != res.SHA256 || got.Revision != 21 {
		t.Fatalf("fetch reported %+v, the backup %+v", got, res)
	}
	if got := fetchedSnapshot(t, scratch); got != res.SHA256 {
		t.Fatalf("the scratch directory holds a snapshot with sha256 %q, want %s", got, res.SHA256)
	}
}

// A verify Job's comparison, run against a real etcd serving the restored snapshot of a
// compacted cluster: a record the snapshot matches passes, one it does not fails the Job for
// good, as unrestorable, naming what differs. The hash is held to the record only when both
// were compacted at the same revision; a record the restored member has compacted away can
// no longer describe it, and is not held against it.
func TestVerifyComparesTheRestoredKeyspaceWithTheRecord(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	raw := servers[0].Client(t)
	for i := range 20 {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("k%03d", i%15), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Compact(t.Context(), 11); err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	recorded := *res.Keyspace
	if res.Revision != 21 || recorded.Revision != 21 || recorded.KeyCount != 15 || recorded.CompactRevision != 11 {
		t.Fatalf("backup recorded revision %d and keyspace %+v; want revision 21, 15 keys, compacted at 11", res.Revision, recorded)
	}
	restored, err := serveRestored(t, dest, res)
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		mismatch     string // in the report's error; empty, the Job succeeds
		keyCount     int64
		hashCompared bool
	}
	for name, tc := range map[string]struct {
		revision int64
		change   func(*etcdv1alpha1.SnapshotKeyspace)
		want     want
	}{
		"as recorded":                  {21, func(*etcdv1alpha1.SnapshotKeyspace) {}, want{keyCount: 15, hashCompared: true}},
		"a newer revision":             {22, func(*etcdv1alpha1.SnapshotKeyspace) {}, want{mismatch: "at revision 21, below the recorded 22"}},
		"another key count":            {21, func(k *etcdv1alpha1.SnapshotKeyspace) { k.KeyCount = 16 }, want{mismatch: "holds 15 keys at revision 21, the recorded 16", keyCount: 15}},
		"another hash":                 {21, func(k *etcdv1alpha1.SnapshotKeyspace) { k.HashKV++ }, want{mismatch: fmt.Sprintf("not the recorded %d", recorded.HashKV+1), keyCount: 15, hashCompared: true}},
		"another hash, compacted at 5": {21, func(k *etcdv1alpha1.SnapshotKeyspace) { k.HashKV++; k.CompactRevision = 5 }, want{keyCount: 15}},
		"a revision compacted away":    {21, func(k *etcdv1alpha1.SnapshotKeyspace) { k.Revision, k.KeyCount, k.HashKV = 8, 7, 1 }, want{}},
		"no keyspace recorded":         {21, nil, want{}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := jobspec.JobConfig{Endpoints: []string{restored.ClientURL}, Revision: tc.revision}
			if tc.change != nil {
				keyspace := recorded
				tc.change(&keyspace)
				cfg.Keyspace = &keyspace
			}
			code, report := runAsJob(t, agent.RunVerify, cfg, t.TempDir(), restored.scratch)
			got := report.Verify
			if got == nil {
				t.Fatalf("exit %d, no verification in the report %+v", code, report)
			}
			if got.Revision != 21 || got.KeyCount != tc.want.keyCount || got.HashCompared != tc.want.hashCompared {
				t.Errorf("verification %+v; want revision 21, %d keys, hash compared %t", got, tc.want.keyCount, tc.want.hashCompared)
			}
			if tc.want.mismatch == "" {
				if code != 0 || report.Error != "" || got.Mismatch != "" {
					t.Fatalf("a snapshot its record describes: exit %d, %+v", code, report)
				}
				return
			}
			if code != jobspec.ExitPermanent || !report.Permanent || !report.Unrestorable {
				t.Fatalf("a snapshot other than recorded: exit %d, %+v; want it failed for good as unrestorable", code, report)
			}
			if !strings.Contains(report.Error, tc.want.mismatch) || got.Mismatch != report.Error {
				t.Errorf("the report says %q (mismatch %q); want %q", report.Error, got.Mismatch, tc.want.mismatch)
			}
		})
	}
}

// fetchFromBucket is the configuration of a fetch of the backup res from srv's bucket, checked
// against sha256, with the keys of the credentials Secret the location names in the
// environment, as a Job's or a member pod's environment holds them.
func fetchFromBucket(t *testing.T, srv *s3test.Server, res agent.BackupResult, sha256 string) jobspec.JobConfig {
	t.Setenv(jobspec.AccessKeyIDEnv, s3test.AccessKey)
	t.Setenv(jobspec.SecretAccessKeyEnv, s3test.SecretKey)
	t.Setenv(jobspec.SessionTokenEnv, "")
	return jobspec.JobConfig{
		Storage: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: "backups", Prefix: "etcd/", Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true, CredentialsSecretName: "s3-creds",
		}},
		Key: strings.TrimPrefix(res.URI, "s3://backups/etcd/"), SHA256: sha256,
	}
}

// A verify Job's reports carry the snapshot's recovery time, from its fetch's start to the
// restored member first answering a linearizable read: the fetch reports when it began and
// ended, the verifier when the member answered. A member that starts only after the verifier
// (the pod starts them side by side) is seen answering within moments of its start, not at the
// end of the seconds-long backoff gRPC keeps after a refused connection.
func TestVerifyJobReportsWhenTheRestoredSnapshotServed(t *testing.T) {
	srv, _, res := backUpCluster(t, 1, 50)
	scratch := t.TempDir()
	code, fetch := runAsJob(t, agent.RunVerifyFetch, fetchFromBucket(t, srv, res, res.SHA256), t.TempDir(), scratch)
	if code != 0 || fetch.Restore == nil {
		t.Fatalf("fetch: exit %d, %+v", code, fetch)
	}
	if fetch.Began.IsZero() || fetch.Ended.Before(fetch.Began) || fetch.Restore.SizeBytes != res.SizeBytes {
		t.Fatalf("fetch reported it began at %v and ended at %v, with %d bytes; want both, in order, and the snapshot's %d bytes",
			fetch.Began, fetch.Ended, fetch.Restore.SizeBytes, res.SizeBytes)
	}

	member := etcdtest.NewServer(t, "verify")
	member.ClientURL = strings.Replace(member.ClientURL, "http://", "https://", 1)
	member.ExtraArgs = jobspec.VerifyEtcdTLSArgs(filepath.Join(scratch, jobspec.VerifyTLSSubdir))
	restore := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore",
		filepath.Join(scratch, filepath.Base(jobspec.VerifySnapshot)), "--data-dir", member.DataDir, "--name", member.Name,
		"--initial-cluster", etcdtest.InitialCluster(member), "--initial-advertise-peer-urls", member.PeerURL)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	cfg := jobspec.JobConfig{Endpoints: []string{member.ClientURL}, Revision: res.Revision, Keyspace: res.Keyspace}
	wait := startInPod(t, agent.RunVerify, cfg, agent.PodPaths{Claim: t.TempDir(), VerifyScratch: scratch})
	// Past gRPC's third refused dial (its backoff: 1 s, then 1.6 times more each time): a
	// verifier that dialled before the member listened tries next about 5 s after its own start,
	// and was seen to report the member answering 1.9 s after the member's start, against
	// 0.3-0.5 s when it dials only once the member listens.
	time.Sleep(3200 * time.Millisecond)
	started := time.Now()
	member.Start(t, "new", etcdtest.InitialCluster(member))
	code, verify := wait()
	if code != 0 || verify.Verify == nil {
		t.Fatalf("verify: exit %d, %+v", code, verify)
	}
	answered := verify.Verify.AnsweredAt
	if answered.Before(started) || answered.Sub(started) > 1500*time.Millisecond {
		t.Fatalf("the restored member started at %s and is reported answering at %s; want within 1.5 s after its start",
			started.Format(time.StampMilli), answered.Format(time.StampMilli))
	}
	t.Logf("recovery time %s: fetch %s, then %s to the member's start, answering %s after it",
		answered.Sub(fetch.Began), fetch.Ended.Sub(fetch.Began), started.Sub(fetch.Ended), answered.Sub(started))
}
