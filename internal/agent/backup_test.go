package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func destination(t *testing.T, srv *s3test.Server, bucket string) *storage.Destination {
	t.Helper()
	d, err := storage.OpenS3(t.Context(), storage.S3{
		Bucket: bucket, Prefix: "etcd/", Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// backUpCluster backs up a real cluster of members holding keys keys to a real S3 server.
func backUpCluster(t *testing.T, members, keys int) (*s3test.Server, *storage.Destination, agent.BackupResult) {
	t.Helper()
	servers := etcdtest.StartCluster(t, members)
	raw := servers[0].Client(t)
	for i := range keys {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: backupplan.Series{Cluster: "main"}, Destination: dest,
		Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, dest, res
}

// A backup of a real three-member cluster lands in a real S3 server as a valid etcd snapshot
// at the revision and with the digest it reports.
func TestBackupToS3IsAVerifiedSnapshot(t *testing.T) {
	srv, _, res := backUpCluster(t, 3, 200)
	if res.URI != "s3://backups/etcd/main-20260301T120000Z-r201.db" || res.Revision != 201 || res.EtcdVersion != "3.6.16" {
		t.Fatalf("result %+v", res)
	}

	file := filepath.Join(srv.Root, "backups", "etcd", "main-20260301T120000Z-r201.db")
	out, err := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "status", file, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	var status struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Revision != res.Revision {
		t.Fatalf("etcdutl sees revision %d (%v), backup reported %d", status.Revision, err, res.Revision)
	}
	if fi, _ := os.Stat(file); fi.Size() != res.SizeBytes {
		t.Fatalf("object is %d bytes, backup reported %d", fi.Size(), res.SizeBytes)
	}
}

// Scheduled runs keep exactly maxCount of this cluster's snapshots, and never touch objects
// they did not write.
func TestRetentionKeepsExactlyMaxCountInTheBucket(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	if err := dest.Upload(t.Context(), "etcd/main-notes.txt", bytes.NewReader([]byte("mine"))); err != nil {
		t.Fatal(err)
	}
	var last agent.BackupResult
	for run := range 4 {
		now := t0.Add(time.Duration(run) * time.Hour)
		var err error
		last, err = agent.Backup(t.Context(), agent.BackupConfig{
			Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: backupplan.Series{Cluster: "main"}, Destination: dest,
			MaxCount: 2, Now: func() time.Time { return now },
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	objects, err := dest.List(t.Context(), "etcd/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objects {
		keys = append(keys, o.Key)
	}
	slices.Sort(keys)
	want := []string{"etcd/main-20260301T140000Z-r1.db", "etcd/main-20260301T150000Z-r1.db", "etcd/main-notes.txt"}
	if !slices.Equal(keys, want) {
		t.Fatalf("bucket holds %v, want %v", keys, want)
	}
	if len(last.Pruned) != 1 || !strings.HasSuffix(last.Pruned[0], "main-20260301T130000Z-r1.db") {
		t.Fatalf("last run reports pruning %v", last.Pruned)
	}
}

func TestBackupFailuresLeaveNoObject(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	cfg := agent.BackupConfig{Series: backupplan.Series{Cluster: "main"}, Destination: dest, Now: func() time.Time { return t0 }}

	cfg.Etcd = etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}
	servers[0].Stop()
	if _, err := agent.Backup(t.Context(), cfg); err == nil {
		t.Fatal("a backup of a stopped cluster succeeded")
	}
	if objects, _ := dest.List(t.Context(), "etcd/"); len(objects) != 0 {
		t.Fatalf("a failed backup left %+v", objects)
	}
}
