package resources

import (
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
	job, err := BackupJob(b, c, "registry/etcd-operator:v1", time.Now(), nil)
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
