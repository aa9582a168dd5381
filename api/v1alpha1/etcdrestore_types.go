package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdRestoreSpec says which snapshot to restore and where to.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EtcdRestore cannot be changed once created; create a new EtcdRestore"
type EtcdRestoreSpec struct {
	// Source of the snapshot.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Source"
	Source RestoreSource `json:"source"`

	// Target cluster of the restore.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Target"
	Target RestoreTarget `json:"target"`

	// RevisionBump is how far past the snapshot's revision the restored cluster starts, with
	// every revision below marked compacted. Clients key what they hold by revision (a
	// Kubernetes API server's watch cache and every informer above all): restored to an older
	// revision, the cluster would hand out revisions again that they already hold with other
	// data, and their watches would replay or miss events. Bumped, every watch from before
	// the restore ends with a compaction error and its client lists afresh.
	// Auto (the default) bumps past the highest revision the operator saw the cluster reach,
	// with a fifth to spare and at least 1,000,000, or by 1,000,000,000 when it knows none
	// (a snapshot from a location, or of a cluster that is gone). None restores the snapshot's
	// revision as it is: only for a cluster no client has watched. A number bumps by that
	// much. A bump needs etcd 3.5.10 or newer.
	// +kubebuilder:validation:Pattern=`^(Auto|None|[1-9][0-9]{0,17})$`
	// +kubebuilder:default=Auto
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Revision Bump"
	// +optional
	RevisionBump string `json:"revisionBump,omitempty"`
}

// RestoreSource is an EtcdBackup's snapshot, a snapshot at an explicit location, or a point
// in an EtcdBackup's continuous archive. Exactly one is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.backup), has(self.location), has(self.pointInTime)].exists_one(x, x)",message="set exactly one of source.backup, source.location or source.pointInTime"
type RestoreSource struct {
	// Backup restores a snapshot recorded by an EtcdBackup in the same namespace.
	// +optional
	Backup *BackupReference `json:"backup,omitempty"`

	// Location restores a snapshot from storage directly, for snapshots taken elsewhere.
	// +optional
	Location *SnapshotLocation `json:"location,omitempty"`

	// PointInTime restores the keyspace as it was at a revision or a time, from an
	// EtcdBackup with spec.continuous: the newest of its snapshots at or before the target,
	// with the archive's revisions after it replayed, one transaction per original revision,
	// up to the target exactly. The result is a snapshot of its own, written beside the
	// backup's (status.snapshotURI), restored like any other with the revision bump.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Point In Time"
	PointInTime *PointInTimeSource `json:"pointInTime,omitempty"`

	// Encryption is the Secret of age keys that decrypts an encrypted snapshot. For a
	// source.backup it defaults to the EtcdBackup's spec.encryption; give it when that
	// Secret no longer holds the snapshot's key, or for a source.location. The snapshot's key
	// must be in it: a restore without it fails before anything is touched, naming the key id
	// it needs. A snapshot stored in plain needs none.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Decryption Keys"
	Encryption *SnapshotEncryption `json:"encryption,omitempty"`
}

// BackupReference picks a snapshot recorded by an EtcdBackup.
type BackupReference struct {
	// Name of the EtcdBackup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// URI of one of the EtcdBackup's completed snapshots, from status.lastBackup or
	// status.history. Empty means its latest completed snapshot. Should the snapshot no longer
	// exist in storage (deleted outside the operator), the newest older one the EtcdBackup's
	// status names that does is restored instead, and the restore says so
	// (status.missingSnapshotURI, a SnapshotFallback event). To restore one snapshot exactly
	// or nothing, use source.location.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(s3|pvc)://.+$`
	// +optional
	URI string `json:"uri,omitempty"`
}

// PointInTimeSource is a point in an EtcdBackup's continuous archive: a revision or a time.
//
// +kubebuilder:validation:XValidation:rule="[has(self.revision), has(self.time)].exists_one(x, x)",message="set exactly one of pointInTime.revision or pointInTime.time"
type PointInTimeSource struct {
	// Backup is the EtcdBackup, in the same namespace, with spec.continuous.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Backup string `json:"backup"`

	// Revision of the source cluster to restore: the keyspace exactly as a read at that
	// revision returned it. It must lie in the backup's status.archive.recoverableRange or
	// one of its earlierRanges.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision *int64 `json:"revision,omitempty"`

	// Time to restore, in RFC 3339 such as 2026-03-01T14:02:00Z: the last revision the
	// archiver had received at or before it (the archive's times are when the archiver saw a
	// revision, at or after its commit). status.pointInTime.revision says which revision that
	// was.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// Inclusive: true (the default) restores the target revision, or the revisions received at
	// the target time, with the rest; false stops just before: the revision before the target,
	// or the last revision received strictly before the time. To undo a write whose revision is
	// known (a deletion in etcd's logs, a watch event), give its revision and false.
	// +kubebuilder:default=true
	// +optional
	Inclusive *bool `json:"inclusive,omitempty"`
}

// SnapshotLocation is one snapshot file in storage.
//
// +kubebuilder:validation:XValidation:rule="!has(self.pvc) || !has(self.pvc.provision)",message="pvc.provision applies to a backup's destination: a restore reads a claim that exists, so leave provision out"
type SnapshotLocation struct {
	// StorageLocation is the bucket (with its prefix) or claim (with its subPath) holding it.
	StorageLocation `json:",inline"`

	// Key of the snapshot: the object key after the prefix, or the file's path under the
	// subPath, such as db/main/daily_<backup UID>/20260301T120000Z-r99.db (or, for a snapshot
	// of the earlier format, main-20260301T120000Z-r99.db).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="key must be a relative path without '..'"
	Key string `json:"key"`

	// SHA256 the snapshot must have, in hexadecimal. Strongly recommended: without it a
	// truncated or corrupted snapshot is only caught by etcdutl's own integrity check.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	// +optional
	SHA256 string `json:"sha256,omitempty"`
}

// RestoreMode is New or InPlace.
// +kubebuilder:validation:Enum=New;InPlace
type RestoreMode string

const (
	// RestoreNew creates a new EtcdCluster seeded from the snapshot.
	RestoreNew RestoreMode = "New"
	// RestoreInPlace replaces the data of an existing EtcdCluster, keeping its name, Services
	// and Secrets. Everything written after the snapshot is lost.
	RestoreInPlace RestoreMode = "InPlace"
)

// RestoreTarget is the cluster that receives the snapshot.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'New' || has(self.cluster)",message="target.cluster (the new EtcdCluster's spec) is required when target.mode is New"
// +kubebuilder:validation:XValidation:rule="self.mode != 'InPlace' || !has(self.cluster)",message="target.cluster must be empty when target.mode is InPlace: the existing cluster keeps its spec"
type RestoreTarget struct {
	// Mode is New (create a new EtcdCluster) or InPlace (replace an existing cluster's data,
	// losing everything written after the snapshot). There is no default: say which.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Mode",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:New","urn:alm:descriptor:com.tectonic.ui:select:InPlace"}
	Mode RestoreMode `json:"mode"`

	// ClusterName of the EtcdCluster to create (New, the name must be free) or to restore
	// into (InPlace).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	ClusterName string `json:"clusterName"`

	// Cluster is the spec of the new EtcdCluster (New mode). Its version must be at least
	// the version the snapshot was taken with, and it can be neither paused nor ephemeral: the
	// restored data is prepared on the first member's claim, and the cluster forms from it.
	// A snapshot its EtcdBackup recorded as taken with authentication on (authEnabled) needs
	// auth here, its Secret holding root's password of the snapshot's time (any password
	// when the operator kept that one for the backed-up cluster): the restored etcd refuses
	// every client without a user, and the restore is refused without it.
	// +optional
	Cluster *EtcdClusterSpec `json:"cluster,omitempty"`
}

// RestorePhase is where a restore stands.
// +kubebuilder:validation:Enum=Pending;Restoring;Completed;Failed
type RestorePhase string

const (
	RestorePending   RestorePhase = "Pending"
	RestoreRestoring RestorePhase = "Restoring"
	RestoreCompleted RestorePhase = "Completed"
	RestoreFailed    RestorePhase = "Failed"
)

// ReplacedData records what an in-place restore replaced, for the audit trail.
type ReplacedData struct {
	// ClusterID of the replaced cluster, in hexadecimal.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// Revision the replaced cluster had reached.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Members that were replaced.
	// +optional
	Members []string `json:"members,omitempty"`
}

// PointInTimeStatus is the snapshot a point-in-time restore built, and from what.
type PointInTimeStatus struct {
	// Revision of the source cluster restored: the target revision, or the one the target time
	// resolved to.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Target Revision"
	Revision int64 `json:"revision,omitempty"`
	// BaseURI is the snapshot the keyspace was built from.
	// +optional
	BaseURI string `json:"baseURI,omitempty"`
	// BaseRevision is that snapshot's revision.
	// +optional
	BaseRevision int64 `json:"baseRevision,omitempty"`
	// Lineage of the archive replayed.
	// +optional
	Lineage string `json:"lineage,omitempty"`
	// ReplayedRevisions is how many revisions of the archive were replayed onto the base.
	// +optional
	ReplayedRevisions int64 `json:"replayedRevisions,omitempty"`
	// Job that built the snapshot.
	// +optional
	Job string `json:"job,omitempty"`
	// Message says why it could not be built, if it could not.
	// +optional
	Message string `json:"message,omitempty"`
}

// EtcdRestoreStatus is what the operator last observed.
type EtcdRestoreStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase of the restore.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors="urn:alm:descriptor:io.kubernetes.phase"
	Phase RestorePhase `json:"phase,omitempty"`

	// SnapshotURI of the snapshot being restored.
	// +optional
	SnapshotURI string `json:"snapshotURI,omitempty"`

	// MissingSnapshotURI is the EtcdBackup's snapshot the source named, when it no longer
	// existed in storage: snapshotURI is then the newest older snapshot of the same EtcdBackup
	// that did, restored instead.
	// +optional
	MissingSnapshotURI string `json:"missingSnapshotURI,omitempty"`

	// SnapshotSHA256 the snapshot was verified against.
	// +optional
	SnapshotSHA256 string `json:"snapshotSHA256,omitempty"`

	// RestoredRevision is the etcd revision the restored cluster starts from, once the restore
	// has read it from the snapshot: 0 for a snapshot of a keyspace never written to.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Restored Revision"
	RestoredRevision *int64 `json:"restoredRevision,omitempty"`

	// RevisionBump is how far past the snapshot's revision (restoredRevision) the restored
	// cluster starts: its first revision is restoredRevision + revisionBump, and every one
	// below it is compacted. Set when the restore Job is made.
	// +optional
	RevisionBump int64 `json:"revisionBump,omitempty"`

	// PointInTime is how a point-in-time restore built its snapshot.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Point In Time"
	PointInTime *PointInTimeStatus `json:"pointInTime,omitempty"`

	// Replaced is what an in-place restore replaced.
	// +optional
	Replaced *ReplacedData `json:"replaced,omitempty"`

	// StartTime of the restore.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Started",xDescriptors="urn:alm:descriptor:timestamp"
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// InstallTime is when the restored data was handed to the cluster: the cut-over of an
	// in-place restore, or the start of a new cluster's first member. From then on the restore
	// cannot be undone by failing it; it waits for the cluster to serve at its size.
	// +optional
	InstallTime *metav1.Time `json:"installTime,omitempty"`

	// CompletionTime is when the restored cluster became Available, or the restore failed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Completed",xDescriptors="urn:alm:descriptor:timestamp"
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Conditions: Succeeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors="urn:alm:descriptor:io.kubernetes.conditions"
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdRestore restores an etcd snapshot into a new EtcdCluster or, explicitly, in place into
// an existing one, using the target etcd version's own etcdutl.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="an EtcdRestore name must be at most 63 characters: its Jobs are labelled with it"
// +kubebuilder:resource:shortName=etcdrestore;etcdrs,categories=etcd-operator
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.target.clusterName`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.target.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.restoredRevision`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshotURI`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="etcd Restore",resources={{EtcdCluster,v1alpha1},{Job,v1},{Pod,v1},{PersistentVolumeClaim,v1}}
type EtcdRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdRestoreSpec   `json:"spec"`
	Status EtcdRestoreStatus `json:"status,omitempty"`
}

// EtcdRestoreList is a list of EtcdRestore.
//
// +kubebuilder:object:root=true
type EtcdRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdRestore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EtcdRestore{}, &EtcdRestoreList{})
}
