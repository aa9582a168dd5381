package agent_test

import (
	"testing"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// A bucket with no credentials Secret is opened with the pod's own AWS identity; one whose
// Secret lacks the keys is a permanent error that names the Secret and the keys.
func TestStorageCredentialsFromASecretOrThePodsIdentity(t *testing.T) {
	for _, name := range []string{jobspec.AccessKeyIDEnv, jobspec.SecretAccessKeyEnv, jobspec.SessionTokenEnv} {
		t.Setenv(name, "")
	}
	ambient := etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "snaps", Region: "us-east-1", ServiceAccountName: "etcd-backups"}}
	d, err := agent.OpenStorage(t.Context(), ambient)
	if err != nil {
		t.Fatalf("a bucket reached with the pod's identity: %v", err)
	}
	_ = d.Close()

	fromSecret := etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "snaps", Region: "us-east-1", CredentialsSecretName: "s3-creds"}}
	if _, err := agent.OpenStorage(t.Context(), fromSecret); err == nil || !agent.IsPermanent(err) {
		t.Fatalf("a Secret without the keys: %v, want a permanent error", err)
	}
}
