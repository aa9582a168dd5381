package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EtcdBackupSpec is a one-shot backup, or, with a schedule, a series of them.
//
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || !has(self.retention)",message="retention applies to scheduled backups only: set schedule too"
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || !has(self.suspend) || !self.suspend",message="suspend applies to scheduled backups only: set schedule too"
// +kubebuilder:validation:XValidation:rule="has(self.schedule) == has(oldSelf.schedule)",message="a one-shot EtcdBackup cannot become scheduled, nor the other way round; create a new EtcdBackup"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.schedule) || self == oldSelf",message="a one-shot EtcdBackup is an immutable record; create a new EtcdBackup"
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || !has(self.verify.everyNthRun) || self.verify.everyNthRun <= (has(self.historyLimit) ? self.historyLimit : 10)",message="verify.everyNthRun must be at most historyLimit (10 unless set): status remembers only that many runs"
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || !has(self.continuous)",message="continuous applies to scheduled backups only: the scheduled snapshots are what a point-in-time restore starts from; set schedule too"
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || !has(self.verify) || self.verify.policy != 'EveryNthRun'",message="verify.policy EveryNthRun applies to scheduled backups only: a one-shot backup has one run; use Always"
type EtcdBackupSpec struct {
	// ClusterName is the EtcdCluster, in the same namespace, to back up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterName is immutable; create a new EtcdBackup for another cluster"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Cluster",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	ClusterName string `json:"clusterName"`

	// Destination of the snapshots.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="destination is immutable: retention could no longer find earlier snapshots; create a new EtcdBackup"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Destination"
	Destination StorageLocation `json:"destination"`

	// Schedule in cron format, in UTC: five fields separated by single spaces, minute (0-59),
	// hour (0-23), day of month (1-31), month (1-12 or JAN-DEC) and day of week (0-6 or
	// SUN-SAT, 0 is Sunday), each *, a value, a range a-b or a list a,b,c, optionally with a
	// step /n; ? may stand for * in the day fields. For example "0 */6 * * *" or
	// "30 2 * * MON-FRI". Or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight,
	// @hourly, or @every <duration> of at least 10s such as @every 6h or @every 1h30m. Without it, the
	// EtcdBackup takes one snapshot.
	//
	// Anything else, including a TZ= prefix, is refused when the EtcdBackup is applied.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^@every ([0-9]{1,5}([.][0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$')",message="schedule must be five cron fields separated by single spaces (minute hour day-of-month month day-of-week, in UTC, without a TZ= prefix) such as '0 */6 * * *', or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, or @every <duration> such as @every 6h or @every 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^@every ([0-9]{1,5}([.][0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') || duration(self.substring(7)) >= duration('10s')",message="schedule: @every must be at least 10s (0s, or a few seconds, is taken for a mistake: each run starts a Job, which alone takes seconds)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.split(' ')[0].split(',').all(e, e.matches('^([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/0?[1-9][0-9]?)?$') && (!e.split('/')[0].contains('-') || int(e.split('/')[0].split('-')[0]) <= int(e.split('/')[0].split('-')[1])))",message="schedule: the minute (1st field) must be * or 0-59: a value, a range a-b with a <= b, or a comma-separated list of those, each optionally with a step /n (n from 1 to 99)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.split(' ')[1].split(',').all(e, e.matches('^([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/0?[1-9][0-9]?)?$') && (!e.split('/')[0].contains('-') || int(e.split('/')[0].split('-')[0]) <= int(e.split('/')[0].split('-')[1])))",message="schedule: the hour (2nd field) must be * or 0-23: a value, a range a-b with a <= b, or a comma-separated list of those, each optionally with a step /n (n from 1 to 99)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.split(' ')[2].split(',').all(e, e.matches('^([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/0?[1-9][0-9]?)?$') && (!e.split('/')[0].contains('-') || int(e.split('/')[0].split('-')[0]) <= int(e.split('/')[0].split('-')[1])))",message="schedule: the day of month (3rd field) must be *, ? or 1-31: a value, a range a-b with a <= b, or a comma-separated list of those, each optionally with a step /n (n from 1 to 99)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.split(' ')[3].split(',').all(e, e.matches('^([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/0?[1-9][0-9]?)?$') && (!e.split('/')[0].contains('-') || (e.split('/')[0].split('-')[0].matches('^[0-9]+$') ? int(e.split('/')[0].split('-')[0]) : 'janfebmaraprmayjunjulaugsepoctnovdec'.indexOf(e.split('/')[0].split('-')[0].lowerAscii()) / 3 + 1) <= (e.split('/')[0].split('-')[1].matches('^[0-9]+$') ? int(e.split('/')[0].split('-')[1]) : 'janfebmaraprmayjunjulaugsepoctnovdec'.indexOf(e.split('/')[0].split('-')[1].lowerAscii()) / 3 + 1)))",message="schedule: the month (4th field) must be * or 1-12 or JAN-DEC: a value, a range a-b with a <= b, or a comma-separated list of those, each optionally with a step /n (n from 1 to 99)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^[:space:]]+( [^[:space:]]+){4}$') || self.split(' ')[4].split(',').all(e, e.matches('^([*?]|(0?[0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-(0?[0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/0?[1-9][0-9]?)?$') && (!e.split('/')[0].contains('-') || (e.split('/')[0].split('-')[0].matches('^[0-9]+$') ? int(e.split('/')[0].split('-')[0]) : 'sunmontuewedthufrisat'.indexOf(e.split('/')[0].split('-')[0].lowerAscii()) / 3 + 0) <= (e.split('/')[0].split('-')[1].matches('^[0-9]+$') ? int(e.split('/')[0].split('-')[1]) : 'sunmontuewedthufrisat'.indexOf(e.split('/')[0].split('-')[1].lowerAscii()) / 3 + 0)))",message="schedule: the day of week (5th field) must be *, ? or 0-6 or SUN-SAT (0 is Sunday; 7 is not accepted): a value, a range a-b with a <= b, or a comma-separated list of those, each optionally with a step /n (n from 1 to 99)"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schedule",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	Schedule string `json:"schedule,omitempty"`

	// Retention prunes this EtcdBackup's older snapshots from the destination after each
	// successful run.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Retention"
	Retention *BackupRetention `json:"retention,omitempty"`

	// Suspend stops new scheduled runs; a run already started finishes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Suspend",xDescriptors="urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	Suspend bool `json:"suspend,omitempty"`

	// Verify proves snapshots restorable: after a run, a Job reads the snapshot back from the
	// destination, restores it with the cluster's own etcd version in a scratch directory,
	// starts etcd on it alone and checks its revision, key count and hash against what the
	// backup recorded. A snapshot that fails is never picked by a restore. Verifying needs
	// scratch space on the node as large as the database, and the time of a restore. Without
	// it, no snapshot is verified.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Verify"
	Verify *BackupVerification `json:"verify,omitempty"`

	// Encryption encrypts every snapshot, as it streams to the destination, to the newest age
	// key of a Secret (see docs/concepts.md, Encrypted backups). What the destination holds,
	// and the size and sha256 status records, is then the ciphertext; object names, sizes and
	// metadata are not encrypted. A restore or verification needs the Secret with the
	// snapshot's key, and is refused, before anything is touched, without it. Without
	// encryption, snapshots are stored as etcd sends them.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Encryption"
	Encryption *SnapshotEncryption `json:"encryption,omitempty"`

	// Continuous archives every change between the scheduled snapshots, so that an
	// EtcdRestore can bring the cluster back to any revision or time in
	// status.archive.recoverableRange (source.pointInTime). An archiver (a Deployment of one
	// pod, in this namespace) watches the whole keyspace from the newest snapshot's revision
	// and writes every revision, as etcd committed it, to the destination in segments beside the
	// snapshots, encrypted like them with spec.encryption. The scheduled snapshots are the
	// bases a point-in-time restore starts from: retention deletes segments together with the
	// snapshots they build on. While archiving, the operator never compacts past what the
	// archiver has written. Without it, a restore brings back a snapshot and nothing after it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Continuous Archive"
	Continuous *ContinuousArchive `json:"continuous,omitempty"`

	// HistoryLimit is how many runs status.history keeps.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=10
	// +optional
	HistoryLimit int32 `json:"historyLimit,omitempty"`
}

// ContinuousArchive is how the archiver writes the changes between snapshots.
type ContinuousArchive struct {
	// SegmentDuration is the longest a revision waits in the archiver before it is written to
	// the destination: a segment is closed this long after its first revision at the latest.
	// It bounds what a loss of the whole cluster together with the archiver would lose (the
	// recovery point), and sets how many objects the archive makes: one per segment.
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="continuous.segmentDuration must be from 5s to 1h, such as 1m: the longest a change waits before it is written"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Segment Duration",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	SegmentDuration *metav1.Duration `json:"segmentDuration,omitempty"`

	// SegmentMaxBytes closes a segment once its changes reach this size before compression,
	// sooner than segmentDuration under a heavy write load; it bounds the archiver's memory.
	// +kubebuilder:default=16777216
	// +kubebuilder:validation:Minimum=65536
	// +kubebuilder:validation:Maximum=1073741824
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Segment Max Bytes",xDescriptors="urn:alm:descriptor:com.tectonic.ui:number"
	SegmentMaxBytes int64 `json:"segmentMaxBytes,omitempty"`

	// MaxLag is the recovery point held to: when the newest revision the archive holds is older
	// than this (status.archive.lagSeconds), the Archiving condition turns False with
	// LagExceeded and a Warning event says by how much.
	// +kubebuilder:default="5m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="continuous.maxLag must be above 0, such as 5m"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Lag",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	MaxLag *metav1.Duration `json:"maxLag,omitempty"`
}

// ArchivePoint is a revision of the archive and the time the archiver saw it committed.
type ArchivePoint struct {
	// Revision of the source cluster.
	Revision int64 `json:"revision"`
	// Time the archiver received the revision from etcd: at or after its commit, by the
	// archiver's lag at that moment. A restore to a time restores the last revision received
	// at or before it.
	Time metav1.Time `json:"time"`
}

// ArchiveRange is a stretch of revisions a point-in-time restore can reach: from the oldest
// snapshot still present that the archive builds on, to the newest revision written.
type ArchiveRange struct {
	// Lineage is the archive's unbroken chain of revisions the range lies in.
	Lineage string `json:"lineage"`
	// First is the oldest point a restore can reach (the revision of the oldest snapshot the
	// lineage builds on).
	First ArchivePoint `json:"first"`
	// Last is the newest revision written to the destination.
	Last ArchivePoint `json:"last"`
}

// ArchiveGap is where the archive broke and started again from a new snapshot: a revision in
// between cannot be restored.
type ArchiveGap struct {
	// AfterRevision is the last revision archived before the gap.
	AfterRevision int64 `json:"afterRevision"`
	// ResumedAt is the revision of the snapshot the archive started again from.
	// +optional
	ResumedAt int64 `json:"resumedAt,omitempty"`
	// Reason: Compacted (the cluster compacted revisions the archiver had not read), Restored
	// (the cluster was restored in place), or Started (no lineage to continue).
	Reason string `json:"reason"`
	// Time the archiver found the gap.
	Time metav1.Time `json:"time"`
}

// BackupArchiveStatus is what the archiver last reported.
type BackupArchiveStatus struct {
	// RecoverableRange is the range of the lineage being written: a point-in-time restore can
	// reach any revision in it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Recoverable Range"
	RecoverableRange *ArchiveRange `json:"recoverableRange,omitempty"`
	// EarlierRanges are the ranges of earlier lineages still restorable, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	EarlierRanges []ArchiveRange `json:"earlierRanges,omitempty"`
	// HighestRevision is the highest revision the source cluster had served, as etcd said.
	// +optional
	HighestRevision int64 `json:"highestRevision,omitempty"`
	// LagRevisions is how many revisions the cluster has served that are not in the
	// destination yet.
	// +optional
	LagRevisions int64 `json:"lagRevisions,omitempty"`
	// LagSeconds is how long the oldest revision not in the destination yet has waited: what
	// a loss of the cluster and the archiver together would lose now (0 when all is written).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Archive Lag (s)"
	LagSeconds int64 `json:"lagSeconds,omitempty"`
	// Gaps are the newest places the archive broke, newest last, at most 10.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Gaps []ArchiveGap `json:"gaps,omitempty"`
	// Message is the archiver's last error, if any.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedTime is when the operator last read the archiver's report.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// VerifyPolicy says which runs' snapshots are verified.
// +kubebuilder:validation:Enum=Always;Never;EveryNthRun
type VerifyPolicy string

const (
	VerifyAlways      VerifyPolicy = "Always"
	VerifyNever       VerifyPolicy = "Never"
	VerifyEveryNthRun VerifyPolicy = "EveryNthRun"
)

// BackupVerification says which snapshots are verified.
//
// +kubebuilder:validation:XValidation:rule="(self.policy == 'EveryNthRun') == has(self.everyNthRun)",message="verify.everyNthRun is set with policy EveryNthRun, and only then"
type BackupVerification struct {
	// Policy: Always verifies every run's snapshot, EveryNthRun the snapshot of every
	// everyNthRun-th completed run (the first included), Never none.
	// +kubebuilder:default=Always
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Verify Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Always","urn:alm:descriptor:com.tectonic.ui:select:EveryNthRun","urn:alm:descriptor:com.tectonic.ui:select:Never"}
	Policy VerifyPolicy `json:"policy,omitempty"`
	// EveryNthRun is how many completed runs apart verified snapshots are, with policy
	// EveryNthRun; at most spec.historyLimit, the runs status remembers. A snapshot retention
	// deletes before it is verified does not count as verified.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1000
	// +optional
	EveryNthRun int32 `json:"everyNthRun,omitempty"`
	// MaxRecoveryTime is the longest a restore of a snapshot may take to serve, such as "10m":
	// when a verification measures more (status.lastVerified.recoveryTime), the
	// RecoveryTimeWithinBound condition turns False and a Warning event says by how much. The
	// snapshot still counts as verified: it restores, only slower than this. Without it, the
	// recovery time is measured and not held to any bound.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="verify.maxRecoveryTime must be above 0, such as 10m: the longest a restore of a snapshot may take to serve; to hold it to no bound, leave it unset"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Recovery Time",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	MaxRecoveryTime *metav1.Duration `json:"maxRecoveryTime,omitempty"`
}

// BackupRetention bounds the snapshots kept in the destination, applied by each run once its
// snapshot is verified. Only snapshots this EtcdBackup wrote (named with its namespace, name
// and UID) are ever deleted: not those of other EtcdBackups sharing the destination, nor those
// named the earlier way, <cluster>-<UTC time>-r<revision>.db. Never the newest one, nor the one
// status.lastBackup names while a run is under way: a run's snapshot is in status only once the
// run has ended, and until then a restore goes by the one before, so that one is deleted at the
// earliest by the next run.
//
// +kubebuilder:validation:XValidation:rule="has(self.maxCount) || has(self.maxAge)",message="retention needs maxCount, maxAge or both"
type BackupRetention struct {
	// MaxCount is the number of snapshots kept after each run. With maxCount 1 the destination
	// holds two between runs: the newest, and the one before it, which status.lastBackup named
	// while the run was under way; the next run deletes it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxCount *int32 `json:"maxCount,omitempty"`

	// MaxAge is the age past which snapshots are deleted by each run, such as "168h". The
	// snapshot before a run's own is kept by that run whatever its age (status.lastBackup named
	// it while the run was under way) and deleted by the next.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="retention.maxAge must be above 0, such as 168h: snapshots older than that are deleted; to keep a number of snapshots instead, use maxCount"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// BackupPhase is where a backup stands.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed;Scheduled;Suspended
type BackupPhase string

const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupCompleted BackupPhase = "Completed"
	BackupFailed    BackupPhase = "Failed"
	// BackupScheduled: a scheduled EtcdBackup waiting for its next run.
	BackupScheduled BackupPhase = "Scheduled"
	// BackupSuspended: a scheduled EtcdBackup with suspend set.
	BackupSuspended BackupPhase = "Suspended"
)

// BackupArtifact is a snapshot written to the destination and checked there (the Succeeded
// condition says how), its size and sha256 those of what etcd sent, or of their ciphertext
// when encrypted. (A test
// restore of it is spec.verify's, recorded in lastVerified.)
type BackupArtifact struct {
	// URI of the snapshot: s3://bucket/key or pvc://claim/path.
	URI string `json:"uri"`
	// SizeBytes of the snapshot, as streamed and as the destination holds it.
	SizeBytes int64 `json:"sizeBytes"`
	// SHA256 of the snapshot, in hexadecimal, as streamed to the destination, which was found
	// to hold exactly that.
	SHA256 string `json:"sha256"`
	// EncryptionKeyID is the id of the age key the snapshot is encrypted to (spec.encryption):
	// a restore of it needs a Secret holding that key. Empty for a snapshot stored as etcd sent
	// it.
	// +optional
	EncryptionKeyID string `json:"encryptionKeyID,omitempty"`
	// Revision of the etcd keyspace in the snapshot.
	Revision int64 `json:"revision"`
	// EtcdVersion of the member the snapshot was taken from.
	EtcdVersion string `json:"etcdVersion"`
	// Member the snapshot was streamed from.
	// +optional
	Member string `json:"member,omitempty"`
	// ClusterID of the etcd cluster, in hexadecimal.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// ClusterUID is the UID of the EtcdCluster the snapshot was taken of. An EtcdCluster
	// deleted and made again under the same name is another cluster: its quorum-loss recovery
	// never restores this snapshot. Absent in records written before it was recorded.
	// +optional
	ClusterUID types.UID `json:"clusterUID,omitempty"`
	// AuthEnabled says whether etcd had authentication on when the snapshot was taken, as etcd
	// itself answered just before and just after it. A restore of the snapshot brings
	// authentication back on, with the users and the root password of then: a restore of it
	// into a cluster without auth is refused. Absent when not known: in records written before
	// it was recorded, or when etcd's answer changed while the snapshot was taken.
	// +optional
	AuthEnabled *bool `json:"authEnabled,omitempty"`
	// StartTime of the snapshot.
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Started",xDescriptors="urn:alm:descriptor:timestamp"
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when the snapshot was found in the destination as streamed.
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Completed",xDescriptors="urn:alm:descriptor:timestamp"
	CompletionTime metav1.Time `json:"completionTime"`
	// Keyspace is what the member held when the snapshot was taken: what a restore of the
	// snapshot must show. Absent when the member had already compacted that revision away.
	// +optional
	Keyspace *SnapshotKeyspace `json:"keyspace,omitempty"`
	// Verification is the outcome of the snapshot's verification, once verified.
	// +optional
	Verification *SnapshotVerification `json:"verification,omitempty"`
}

// VerificationResult is what a verification found.
// +kubebuilder:validation:Enum=Verified;Failed;NotRun
type VerificationResult string

const (
	// SnapshotVerified: the snapshot restored and matched its record.
	SnapshotVerified VerificationResult = "Verified"
	// SnapshotFailed: the snapshot does not restore, or not to what was recorded. No restore
	// picks it, and one that names it is refused.
	SnapshotFailed VerificationResult = "Failed"
	// SnapshotNotVerified: the verification could not be carried out (a destination the Job
	// cannot read, a pod that did not start); the snapshot is neither proven nor failed, and
	// the next run's snapshot is verified instead.
	SnapshotNotVerified VerificationResult = "NotRun"
)

// SnapshotVerification is one verification of a snapshot.
type SnapshotVerification struct {
	// URI of the snapshot verified.
	URI string `json:"uri"`
	// Result of the verification.
	Result VerificationResult `json:"result"`
	// Revision the restored snapshot was at.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Time the verification ended.
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Verified At",xDescriptors="urn:alm:descriptor:timestamp"
	Time metav1.Time `json:"time"`
	// Duration of the restore and the checks, a measure of how long restoring this snapshot
	// takes.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// RecoveryTime is how long the snapshot took to serve again: from the start of its
	// download to the restored etcd answering a linearizable read. It counts the download and
	// its sha256 check, etcdutl's restore, etcd's start-up and the container starts between them
	// (pulling the cluster's etcd image first if the node lacks it); not the wait for the pod to
	// be scheduled and start, nor the checks after. Absent when the restored etcd never answered.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Recovery Time",xDescriptors="urn:alm:descriptor:text"
	RecoveryTime *metav1.Duration `json:"recoveryTime,omitempty"`
	// RecoverySteps are the parts of recoveryTime.
	// +optional
	RecoverySteps *RecoverySteps `json:"recoverySteps,omitempty"`
	// SizeBytes of the snapshot restored.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Message says what was checked, or how the snapshot failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// RecoverySteps are the parts of a verification's recovery time. What they leave of it is the
// pod's start of etcdutl's container after the download: pulling the cluster's etcd image, if
// the node lacked it.
type RecoverySteps struct {
	// Fetch is the download and its sha256 check, to the millisecond.
	// +optional
	Fetch *metav1.Duration `json:"fetch,omitempty"`
	// Restore is etcdutl snapshot restore's run, to the second (as the kubelet times it).
	// +optional
	Restore *metav1.Duration `json:"restore,omitempty"`
	// StartUp is from the restore's end to the restored etcd answering a linearizable read, to
	// the second.
	// +optional
	StartUp *metav1.Duration `json:"startUp,omitempty"`
}

// SnapshotKeyspace describes the keyspace a snapshot holds, as the member it was taken from
// reported it.
type SnapshotKeyspace struct {
	// Revision the keyspace is described at: the snapshot holds every write up to it.
	Revision int64 `json:"revision"`
	// HashKV is etcd's hash of the keyspace's history up to revision, from compactRevision on.
	HashKV int64 `json:"hashKV"`
	// CompactRevision is where the history was compacted when it was hashed: a restored copy
	// is held to the same hash only when it is compacted at the same revision.
	CompactRevision int64 `json:"compactRevision"`
	// KeyCount is the number of keys at revision.
	KeyCount int64 `json:"keyCount"`
}

// BackupRun is one run, successful or not.
type BackupRun struct {
	// Phase of the run: Completed or Failed.
	Phase BackupPhase `json:"phase"`
	// Message says why a run failed, or that retention deleted a completed run's snapshot.
	// +optional
	Message string `json:"message,omitempty"`
	// Job that carried out the run.
	// +optional
	Job string `json:"job,omitempty"`
	// Artifact of a completed run, while its snapshot exists: once retention has deleted it,
	// the run keeps its record without it.
	// +optional
	Artifact *BackupArtifact `json:"artifact,omitempty"`
	// StartTime of the run.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime of the run.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// EtcdBackupStatus is what the operator last observed.
type EtcdBackupStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase of the backup. A one-shot backup is Pending until its run can start, Running, then
	// Completed or Failed for good. A scheduled one is Scheduled between runs (and while the
	// cluster or the destination is not ready), Running during one, Suspended while
	// spec.suspend is set, and Failed while its schedule cannot be used; each run's outcome is
	// in history and the Succeeded condition.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors="urn:alm:descriptor:io.kubernetes.phase"
	Phase BackupPhase `json:"phase,omitempty"`

	// LastBackup is the newest snapshot that completed and was found intact. Retention never
	// deletes it while it is named here.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Backup"
	LastBackup *BackupArtifact `json:"lastBackup,omitempty"`

	// LastVerified is the newest verification of one of this EtcdBackup's snapshots.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Verified"
	LastVerified *SnapshotVerification `json:"lastVerified,omitempty"`

	// ActiveJob is the Job of the run under way.
	// +optional
	ActiveJob string `json:"activeJob,omitempty"`

	// LastScheduleTime is when the last scheduled run was started.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Run",xDescriptors="urn:alm:descriptor:timestamp"
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// NextScheduleTime is when the next scheduled run is due.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Next Run",xDescriptors="urn:alm:descriptor:timestamp"
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// History of recent runs, newest first, at most spec.historyLimit.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	History []BackupRun `json:"history,omitempty"`

	// Archive is the continuous archive's state, with spec.continuous.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Archive"
	Archive *BackupArchiveStatus `json:"archive,omitempty"`

	// Conditions: Succeeded (the last run), Ready (the destination and cluster can be used),
	// Archiving (with spec.continuous: the archiver writes within continuous.maxLag),
	// Verified (the last verification), RecoveryTimeWithinBound (with
	// spec.verify.maxRecoveryTime: the last verification's recovery time held to it).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors="urn:alm:descriptor:io.kubernetes.conditions"
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdBackup streams a snapshot of an EtcdCluster to object storage or a volume, once or on a
// schedule, with retention applied in the destination.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="an EtcdBackup name must be at most 63 characters: its Jobs are labelled with it"
// +kubebuilder:resource:shortName=etcdbackup;etcdbk,categories=etcd-operator
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastBackup.completionTime`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.lastBackup.sizeBytes`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.lastBackup.revision`
// +kubebuilder:printcolumn:name="URI",type=string,JSONPath=`.status.lastBackup.uri`,priority=1
// +kubebuilder:printcolumn:name="Archived",type=integer,JSONPath=`.status.archive.recoverableRange.last.revision`,priority=1
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.archive.lagSeconds`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="etcd Backup",resources={{Job,v1},{Deployment,v1},{Pod,v1},{Secret,v1},{PersistentVolumeClaim,v1}}
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdBackupSpec   `json:"spec"`
	Status EtcdBackupStatus `json:"status,omitempty"`
}

// EtcdBackupList is a list of EtcdBackup.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EtcdBackup{}, &EtcdBackupList{})
}
