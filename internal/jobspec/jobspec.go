// Package jobspec is the contract between the Jobs the operator builds (internal/resources)
// and the agent they run (internal/agent): one JSON configuration in an environment variable,
// secrets only as files or secret-sourced environment variables, the paths both sides mount
// and read, and the outcome as the container's termination message, which the operator reads
// from the pod's status — no API access for the agent. Both sides import it; neither imports
// the other.
package jobspec

import (
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The environment and the paths of an agent container.
const (
	// ConfigEnv holds the JSON JobConfig.
	ConfigEnv = "ETCD_OPERATOR_AGENT_CONFIG"
	// EtcdPasswordEnv holds the root password of a cluster with auth and no TLS.
	EtcdPasswordEnv = "ETCD_ROOT_PASSWORD"
	// The S3 credentials, from the Secret the user names, under the keys it holds them.
	AccessKeyIDEnv     = "AWS_ACCESS_KEY_ID"
	SecretAccessKeyEnv = "AWS_SECRET_ACCESS_KEY"
	SessionTokenEnv    = "AWS_SESSION_TOKEN"
	// MemoryLimitEnv holds the agent container's own memory limit in bytes (the downward
	// API's limits.memory), from which the agent sets the Go runtime's soft memory limit.
	MemoryLimitEnv = "ETCD_OPERATOR_AGENT_MEMORY_LIMIT"

	// EtcdTLSDir holds the cluster's client certificate Secret (tls.crt, tls.key, ca.crt).
	EtcdTLSDir = "/etc/etcd-operator/etcd-tls"
	// StorageCADir holds the Secret of the CA an S3 server's certificate is checked against.
	StorageCADir = "/etc/etcd-operator/storage-ca"
	// StorageCAKey is the key of that CA in its Secret.
	StorageCAKey = "ca.crt"
	// EncryptionKeysDir holds the Secret of age keys that encrypt or decrypt snapshots, a file
	// per entry.
	EncryptionKeysDir = "/etc/etcd-operator/encryption-keys"
	// ClaimDir is where a PersistentVolumeClaim destination or source is mounted.
	ClaimDir = "/var/lib/etcd-operator/claim"
	// TerminationMessagePath is the Kubernetes default, which the operator reads back.
	TerminationMessagePath = "/dev/termination-log"

	// ExitPermanent tells the Job not to retry: retrying cannot help (bad credentials, no
	// bucket). Any other failure exits 1 and the Job retries it with backoff.
	ExitPermanent = 2
)

// JobConfig is everything an agent Job needs that is not a secret.
type JobConfig struct {
	Cluster string `json:"cluster"`
	// Preserve-data: the member whose data directory is copied.
	Member string `json:"member,omitempty"`
	// Recovery names the directory of the recovery's copies in the recovery claim (its start
	// time); empty, the copy is made at the claim's root.
	Recovery string `json:"recovery,omitempty"`
	// Backup: the namespace, name and UID of the EtcdBackup, which its snapshots' keys carry
	// so that its retention deletes its own snapshots and no other.
	Namespace string `json:"namespace,omitempty"`
	Backup    string `json:"backup,omitempty"`
	BackupUID string `json:"backupUID,omitempty"`
	// Endpoints of the cluster's client Service: the agent asks it for the member list and
	// then picks the member to stream from.
	Endpoints []string `json:"endpoints"`
	// SkipMembers are the IDs (hexadecimal) of members the operator found corrupt: never a
	// backup's source.
	SkipMembers []string `json:"skipMembers,omitempty"`
	// TLS: the client certificate is mounted at EtcdTLSDir.
	TLS bool `json:"tls,omitempty"`
	// Auth without TLS: the root password is in EtcdPasswordEnv.
	Auth bool `json:"auth,omitempty"`

	Storage etcdv1alpha1.StorageLocation `json:"storage"`
	// Encryption: the Secret of keys mounted at EncryptionKeysDir. A backup encrypts to its
	// newest key; a restore or verification decrypts with any of them.
	Encryption *etcdv1alpha1.SnapshotEncryption `json:"encryption,omitempty"`

	// Archive (the archiver of a backup with spec.continuous): a segment is closed once its
	// first revision has waited SegmentDuration or its changes reach SegmentMaxBytes; a
	// lineage is continued only by an archiver with its RestoreMark (the operator changes it
	// when it restores the cluster in place); the archiver reports on StatusAddr.
	SegmentDuration time.Duration `json:"segmentDuration,omitempty"`
	SegmentMaxBytes int64         `json:"segmentMaxBytes,omitempty"`
	RestoreMark     string        `json:"restoreMark,omitempty"`
	StatusAddr      string        `json:"statusAddr,omitempty"`

	// Restore: the snapshot's key after the storage prefix, and the sha256 it must have; and
	// the snapshots to restore instead, newest first, should it no longer exist.
	Key       string     `json:"key,omitempty"`
	SHA256    string     `json:"sha256,omitempty"`
	Fallbacks []Snapshot `json:"fallbacks,omitempty"`
	// RevisionBump the restore applies, and WatermarkDir (after the storage prefix; empty for
	// the snapshot's own directory) where the series' watermarks are: the fetch refuses a bump
	// that does not reach past the highest revision they record.
	RevisionBump int64  `json:"revisionBump,omitempty"`
	WatermarkDir string `json:"watermarkDir,omitempty"`

	// Verify: the snapshot's revision and keyspace as its backup recorded them (Key and SHA256
	// name the snapshot).
	Revision int64                          `json:"revision,omitempty"`
	Keyspace *etcdv1alpha1.SnapshotKeyspace `json:"keyspace,omitempty"`

	// Retention, applied after a verified upload.
	MaxCount int           `json:"maxCount,omitempty"`
	MaxAge   time.Duration `json:"maxAge,omitempty"`
	// LastBackup is the URI of the snapshot the EtcdBackup's status.lastBackup named when the
	// Job was made: retention never deletes it (agent.prune says why).
	LastBackup string `json:"lastBackup,omitempty"`

	// Point in time (pitr-fetch, pitr-replay): the series (Namespace, Cluster, Backup,
	// BackupUID) is materialized at TargetRevision or, when TargetTime is set instead, at the
	// last revision its archive had seen by then.
	TargetRevision int64      `json:"targetRevision,omitempty"`
	TargetTime     *time.Time `json:"targetTime,omitempty"`
	// ExcludeKeys are snapshots of the series (keys after the storage prefix) never taken as
	// the base: those whose verification failed.
	ExcludeKeys []string `json:"excludeKeys,omitempty"`
	// Recorded are the series' snapshots the EtcdBackup's status records: a base among them is
	// fetched against its sha256 and planned from its recorded revision (an object's name
	// carries the revision the backup saw before streaming, which the snapshot may pass).
	Recorded []Snapshot `json:"recorded,omitempty"`
	// RestoreUID names the materialized snapshot after the EtcdRestore it is made for: one
	// object per restore, which a retried Job writes again rather than adding another.
	RestoreUID string `json:"restoreUID,omitempty"`
}

// Snapshot is a snapshot to restore: its key after the storage prefix, and the sha256 it
// must have.
type Snapshot struct {
	Key    string `json:"key"`
	SHA256 string `json:"sha256,omitempty"`
	// Revision the snapshot holds, when recorded; 0 when not known.
	Revision int64 `json:"revision,omitempty"`
}

// A restore Job prepares one member's data on its claim, mounted where the member pod mounts it:
// the agent stages the snapshot, the target etcd image's etcdutl restores it next to it, and
// the agent moves that into place.
const (
	// MemberDataMount is where the member's claim is mounted, as in its pod.
	MemberDataMount = "/var/lib/etcd"
	// MemberDataDir is the data directory etcd runs with.
	MemberDataDir = MemberDataMount + "/data"
	// RestoreStagingDir holds the snapshot and etcdutl's output until install.
	RestoreStagingDir = MemberDataMount + "/restore"
	// StagedSnapshot and StagedDataDir are inside RestoreStagingDir.
	StagedSnapshot = RestoreStagingDir + "/snapshot.db"
	StagedDataDir  = RestoreStagingDir + "/data"
)

// WALSegmentBytes is what etcd allocates for a WAL segment, the first of which etcdutl's
// restore writes beside the restored database.
const WALSegmentBytes = 64 << 20

// RestoreNeedsBytes is the space a member's claim needs to be restored from a snapshot of
// snapshotBytes: the snapshot staged, the database etcdutl restores from it beside it (the
// snapshot's size: etcdutl copies it), and the first WAL segment. The snapshot is removed once
// the data is in place.
func RestoreNeedsBytes(snapshotBytes int64) int64 {
	return 2*snapshotBytes + WALSegmentBytes
}

// A member restored in its own pod (a restore into a new cluster from one snapshot named by its
// sha256) runs the same three steps in two init containers: the agent, in its own image,
// stages the snapshot, records what it fetched next to the data directory, and leaves a copy of
// its binary in an emptyDir; that copy then runs, in the target etcd image, that image's
// etcdutl and installs the result. Both do nothing once the data directory exists, and the
// first reports again what the record says: a member's pod is made again whenever it is lost.
const (
	// RestoredRecord is the fetch's result, kept on the member's claim beside its data.
	RestoredRecord = MemberDataMount + "/restored.json"
	// AgentBinDir is the emptyDir the agent leaves its binary in, AgentBinary that binary.
	AgentBinDir = "/var/lib/etcd-operator/agent"
	AgentBinary = AgentBinDir + "/manager"
)

// A verify Job restores a snapshot into a scratch directory of its own pod (an emptyDir) and
// serves it with etcd alone, on the pod's loopback.
const (
	// VerifyScratchDir holds the fetched snapshot and the data etcdutl restores from it.
	VerifyScratchDir = "/var/lib/etcd-verify"
	// VerifySnapshot and VerifyDataDir are inside VerifyScratchDir.
	VerifySnapshot = VerifyScratchDir + "/snapshot.db"
	VerifyDataDir  = VerifyScratchDir + "/data"
	// VerifyMember is the restored member's name; VerifyClientURL and VerifyPeerURL its
	// loopback addresses, reachable from no other pod.
	VerifyMember    = "verify"
	VerifyClientURL = "https://127.0.0.1:2379"
	VerifyPeerURL   = "http://127.0.0.1:2380"
	// VerifyTLSDir, inside VerifyScratchDir, holds the TLS material made in the pod for the
	// restored member: a CA, the member's server certificate, and a client certificate for
	// root (VerifyEtcdTLSArgs).
	VerifyTLSDir    = VerifyScratchDir + "/" + VerifyTLSSubdir
	VerifyTLSSubdir = "tls"
	// The files in VerifyTLSDir.
	VerifyCAFile         = "ca.crt"
	VerifyServerCertFile = "server.crt"
	VerifyServerKeyFile  = "server.key"
	VerifyClientCertFile = "client.crt"
	VerifyClientKeyFile  = "client.key"
	// VerifyClientUser is the common name of the verifier's client certificate: the user the
	// restored member takes it for.
	VerifyClientUser = "root"
)

// VerifyEtcdTLSArgs are the restored member's flags for the TLS material in dir: it serves
// clients over TLS and requires a client certificate signed by the pod's CA, whose common name
// it takes as the user. A snapshot of a cluster with authentication enabled carries its users,
// and its member refuses a client that names none; through root's certificate the verifier is
// root whatever root's password was when the snapshot was taken.
func VerifyEtcdTLSArgs(dir string) []string {
	return []string{
		"--cert-file=" + dir + "/" + VerifyServerCertFile,
		"--key-file=" + dir + "/" + VerifyServerKeyFile,
		"--trusted-ca-file=" + dir + "/" + VerifyCAFile,
		"--client-cert-auth",
	}
}
