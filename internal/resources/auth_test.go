package resources

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// A backup of a cluster with auth and no TLS authenticates with the password etcd has — the
// operator's record — not the user's Secret, which runs ahead of etcd while it is rotated.
func TestBackupJobAuthenticatesWithThePasswordEtcdHas(t *testing.T) {
	c := testCluster()
	c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "users-root"}
	b := testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}})
	job, err := BackupJob(b, c, "registry/etcd-operator:v1", time.Now(), PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name != jobspec.EtcdPasswordEnv {
			continue
		}
		if ref := e.ValueFrom.SecretKeyRef; ref.Name != RootCredentialsSecretName(c.Name) || ref.Key != RootPasswordKey {
			t.Fatalf("%s from Secret %s key %s, want the operator's record %s", e.Name, ref.Name, ref.Key, RootCredentialsSecretName(c.Name))
		}
		return
	}
	t.Fatalf("no %s in the job's environment", jobspec.EtcdPasswordEnv)
}

// The history keeps each password once, at the last time it was set, newest first, and no
// more than RootPasswordHistoryLimit of them: the oldest go.
func TestRootPasswordHistory(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 11, 1+d, 12, 0, 0, 0, time.UTC) }
	passwords := func(rec RootRecord) []string {
		var out []string
		for _, s := range rec.History {
			out = append(out, fmt.Sprintf("%s@%d", s.Password, s.At.Day()-1))
		}
		return out
	}
	var rec RootRecord
	for d, password := range []string{"a", "b", "a", "c"} {
		rec = rec.WithPasswordSet(password, day(d))
	}
	if got, want := passwords(rec), []string{"c@3", "a@2", "b@1"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	// Merged from another cluster's record: a password both hold keeps the later time.
	other := RootRecord{}.WithPasswordSet("b", day(5)).WithPasswordSet("d", day(0))
	if got, want := passwords(rec.WithPasswordsSet(other.History...)), []string{"b@5", "c@3", "a@2", "d@0"}; !slices.Equal(got, want) {
		t.Fatalf("merged history %v, want %v", got, want)
	}
	for d := range RootPasswordHistoryLimit + 2 {
		rec = rec.WithPasswordSet(fmt.Sprintf("p%d", d), day(10+d))
	}
	if got := passwords(rec); len(got) != RootPasswordHistoryLimit || got[0] != "p11@21" || got[len(got)-1] != "p2@12" {
		t.Fatalf("history %v, want the %d newest", got, RootPasswordHistoryLimit)
	}
}

// The record as a Secret reads back as written, history and times included; a record without
// a history (written by an earlier operator version) reads as one with none.
func TestRootCredentialsReadBackAsWritten(t *testing.T) {
	c := testCluster()
	rec := RootRecord{Password: "now", Pending: "next"}.WithPasswordSet("now", time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)).
		WithPasswordSet("before", time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC))
	secret, err := RootCredentials(c, rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadRootCredentials(secret)
	if err != nil {
		t.Fatal(err)
	}
	if got.Password != "now" || got.Pending != "next" || len(got.History) != 2 || got.History[0].Password != "now" ||
		!got.History[0].At.Equal(&rec.History[0].At) || !got.History[1].At.Equal(&rec.History[1].At) {
		t.Fatalf("read back %+v, wrote %+v", got, rec)
	}
	delete(secret.Data, RootPasswordHistoryKey)
	if got, err := ReadRootCredentials(secret); err != nil || got.Password != "now" || len(got.History) != 0 {
		t.Fatalf("a record without a history reads as %+v, %v", got, err)
	}
	secret.Data[RootPasswordHistoryKey] = []byte(`[{"at":"s3cret"}]`)
	if _, err := ReadRootCredentials(secret); err == nil || !strings.Contains(err.Error(), RootPasswordHistoryKey) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("an unreadable history: %v, want an error naming its key and no password", err)
	}
}
