package v1alpha1

// Condition types. docs/concepts.md explains each reason and what to do about it.
const (
	// ConditionAvailable (EtcdCluster): a quorum of members is healthy and clients are served.
	ConditionAvailable = "Available"
	// ConditionProgressing (EtcdCluster): the operator is carrying out a change.
	ConditionProgressing = "Progressing"
	// ConditionDegraded (EtcdCluster): something needs attention, even if clients are served.
	ConditionDegraded = "Degraded"
	// ConditionSucceeded (EtcdBackup, EtcdRestore): the last run, or the restore, succeeded.
	ConditionSucceeded = "Succeeded"
	// ConditionReady (EtcdBackup): the cluster and destination can be backed up to.
	ConditionReady = "Ready"
	// ConditionVerified (EtcdBackup): the last verification restored a snapshot and found
	// what its backup recorded.
	ConditionVerified = "Verified"
	// ConditionRecoveryTimeWithinBound (EtcdBackup with spec.verify.maxRecoveryTime): the last
	// verification's snapshot served again within that bound.
	ConditionRecoveryTimeWithinBound = "RecoveryTimeWithinBound"
	// ConditionArchiving (EtcdBackup with spec.continuous): the archiver runs and the archive
	// is within continuous.maxLag of the cluster.
	ConditionArchiving = "Archiving"
)

// Condition reasons of an EtcdBackup's continuous archive.
const (
	// ReasonArchiving: the archiver writes every revision, within continuous.maxLag.
	ReasonArchiving = "Archiving"
	// ReasonArchiverStarting: the archiver's pod is not ready yet, or has not reported.
	ReasonArchiverStarting = "ArchiverStarting"
	// ReasonArchiverNotReporting: the archiver's pod ran but its report could not be read.
	ReasonArchiverNotReporting = "ArchiverNotReporting"
	// ReasonLagExceeded: the oldest revision not yet in the destination has waited longer than
	// continuous.maxLag.
	ReasonLagExceeded = "LagExceeded"
	// ReasonArchiveGap: the archive broke (compaction overtook it, or the cluster was restored
	// in place) and started again from a new snapshot; revisions in the gap cannot be restored.
	ReasonArchiveGap = "ArchiveGap"
)

// Condition reasons of EtcdCluster. The operations (ScalingUp, Upgrading, ...) are also the
// names internal/membership gives its steps: this is their one definition.
const (
	ReasonBootstrapping     = "Bootstrapping"
	ReasonRecoveringMembers = "RecoveringMembers"
	ReasonEnablingAuth      = "EnablingAuth"
	// ReasonChangingRootPassword: the root password in etcd is being changed to the one in
	// spec.auth.rootSecretName.
	ReasonChangingRootPassword = "ChangingRootPassword"
	// ReasonCredentialsRejected: etcd refuses every root password the operator knows.
	ReasonCredentialsRejected = "CredentialsRejected"
	// ReasonAuthRequired: etcd has authentication on and the cluster has no spec.auth, so the
	// operator has no user to connect as (EtcdCluster); the snapshot was taken with
	// authentication on and the restore's target has no auth (EtcdRestore).
	ReasonAuthRequired = "AuthRequired"
	// ReasonAuthWithoutTLS (event): spec.auth without spec.tls sends the root password in
	// clear text.
	ReasonAuthWithoutTLS = "AuthWithoutTLS"
	ReasonDefragmenting  = "Defragmenting"
	// ReasonRollingOut: members are restarted one at a time on a changed spec, or their
	// claims expanded.
	ReasonRollingOut = "RollingOut"
	// ReasonRotatingCA: the cluster's CA is being replaced (status.caRotation says how far).
	ReasonRotatingCA = "RotatingCA"
	// ReasonMembersNotRunning: a member's pod cannot run (unschedulable, image not pullable,
	// crash-looping), or has not started on its node for long (a volume that cannot be attached
	// or mounted, a sandbox that cannot be made); the message names the member and the cause.
	ReasonMembersNotRunning = "MembersNotRunning"
	// ReasonMembersNotReady: etcd has a quorum, but fewer than a quorum of voting members are
	// healthy with a Ready pod (as just after the cluster forms), so the client Service cannot
	// send clients to a quorum.
	ReasonMembersNotReady = "MembersNotReady"
	// ReasonReconcileError: the operator could not read or write what it needs in Kubernetes.
	ReasonReconcileError = "ReconcileError"
	// ReasonQuotaNotBelowStorage: tuning.quotaBackendBytes is at least the member's volume.
	ReasonQuotaNotBelowStorage = "QuotaNotBelowStorage"
	// ReasonNoFaultTolerance: a two-member cluster needs both members for quorum.
	ReasonNoFaultTolerance = "NoFaultTolerance"
	ReasonQuorumHealthy    = "QuorumHealthy"
	ReasonQuorumLost       = "QuorumLost"
	ReasonMembersUnhealthy = "MembersUnhealthy"
	ReasonScalingUp        = "ScalingUp"
	ReasonScalingDown      = "ScalingDown"
	ReasonReplacingMember  = "ReplacingMember"
	ReasonPromotingLearner = "PromotingLearner"
	ReasonUpgrading        = "Upgrading"
	ReasonRestoring        = "Restoring"
	// ReasonRecoveringQuorum: a quorum lost for good is being recovered from a survivor.
	ReasonRecoveringQuorum = "RecoveringQuorum"
	ReasonPaused           = "Paused"
	ReasonReconciled       = "Reconciled"
	ReasonAlarm            = "Alarm"
	// ReasonCorruptMember (Degraded): a member's data diverged from the others' (etcd's
	// CORRUPT alarm, its start-up check, or the operator's hash comparison); the operator
	// replaces it while a quorum holds.
	ReasonCorruptMember = "CorruptMember"
	// ReasonReplacingCorruptMember: the step under way replaces a corrupt member.
	ReasonReplacingCorruptMember = "ReplacingCorruptMember"
	ReasonCertificateError       = "CertificateError"
	ReasonInvalidSpec            = "InvalidSpec"
)

// Condition reasons of EtcdCluster with tls.provider CertManager.
const (
	// ReasonCertManagerNotInstalled: the API server did not serve cert-manager's
	// Certificates (cert-manager.io/v1) when the operator started; nothing is created.
	ReasonCertManagerNotInstalled = "CertManagerNotInstalled"
	// ReasonCertificatesNotReady: a cert-manager Certificate of the cluster is not Ready; the
	// message carries cert-manager's own (an issuer not found, a request refused). Members
	// start only once every Certificate was Ready once.
	ReasonCertificatesNotReady = "CertificatesNotReady"
	// ReasonUntrustedIssuer: a Secret cert-manager wrote holds a certificate that does not
	// chain to the CA members trust (<cluster>-trust-bundle): the issuer's CA was replaced in
	// place.
	ReasonUntrustedIssuer = "UntrustedIssuer"
)

// Condition reasons of an EtcdBackup's verification.
const (
	ReasonVerifying = "Verifying"
	// ReasonSnapshotVerified: the snapshot restored and matched its record.
	ReasonSnapshotVerified = "SnapshotVerified"
	// ReasonVerificationFailed: the snapshot does not restore, or restores to other data than
	// recorded; no restore picks it.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonVerificationNotRun: the verify Job could not check the snapshot (a destination it
	// cannot read, a pod that did not start); the snapshot is neither proven nor failed.
	ReasonVerificationNotRun = "VerificationNotRun"
	// ReasonSnapshotFailedVerification (EtcdRestore): the snapshot named failed verification.
	ReasonSnapshotFailedVerification = "SnapshotFailedVerification"
)

// Condition reasons of an EtcdBackup's recovery time, held to spec.verify.maxRecoveryTime.
const (
	// ReasonRecoveryTimeWithinBound: the last verification's recovery time is within the bound.
	ReasonRecoveryTimeWithinBound = "RecoveryTimeWithinBound"
	// ReasonRecoveryTimeExceeded: the last verification's snapshot took longer than the bound
	// to serve again; it is still verified, restorable, only slower than wanted.
	ReasonRecoveryTimeExceeded = "RecoveryTimeExceeded"
	// ReasonRecoveryTimeNotMeasured: no verification has measured a recovery time yet, or the
	// last one could not (its restored etcd never answered).
	ReasonRecoveryTimeNotMeasured = "RecoveryTimeNotMeasured"
)

// Condition reasons of EtcdBackup and EtcdRestore.
const (
	ReasonReady               = "Ready"
	ReasonClusterNotFound     = "ClusterNotFound"
	ReasonClusterNotAvailable = "ClusterNotAvailable"
	ReasonSecretNotFound      = "SecretNotFound"
	ReasonClaimNotFound       = "ClaimNotFound"
	// ReasonClaimNotProvisioned: destination.pvc.provision is set, the claim does not exist,
	// and the operator could not create it (the API server's refusal is in the message).
	ReasonClaimNotProvisioned = "ClaimNotProvisioned"
	// ReasonServiceAccountNotFound: the S3 location's serviceAccountName does not exist, and
	// a Job running as it could not be created.
	ReasonServiceAccountNotFound = "ServiceAccountNotFound"
	// ReasonSecretKeysMissing: a Secret the Job reads lacks a key it needs (named).
	ReasonSecretKeysMissing = "SecretKeysMissing"
	// ReasonEncryptionKeysNotFound: the Secret of encryption keys (spec.encryption,
	// source.encryption) does not exist.
	ReasonEncryptionKeysNotFound = "EncryptionKeysNotFound"
	// ReasonEncryptionKeysInvalid: an entry of the Secret of encryption keys is not one age
	// X25519 identity, or the Secret has none.
	ReasonEncryptionKeysInvalid = "EncryptionKeysInvalid"
	// ReasonEncryptionKeyMissing: the snapshot is encrypted to a key (its id named) that no
	// Secret given holds, or no Secret of keys is given.
	ReasonEncryptionKeyMissing = "EncryptionKeyMissing"
	// ReasonInvalidDestination: the destination cannot be written to safely (a member's claim).
	ReasonInvalidDestination = "InvalidDestination"
	ReasonAgentImageUnknown  = "AgentImageUnknown"
	ReasonInvalidSchedule    = "InvalidSchedule"
	ReasonSuspended          = "Suspended"
	ReasonRunning            = "Running"
	ReasonCompleted          = "Completed"
	ReasonFailed             = "Failed"
	// ReasonPermanentFailure: retrying cannot help (credentials refused, no such bucket).
	ReasonPermanentFailure = "PermanentFailure"
	// ReasonJobNotStarting: the Job's pod did not start running in time (unschedulable, an
	// image it cannot pull, a volume attached elsewhere); the run is failed rather than left
	// holding the next run and OLM upgrades back.
	ReasonJobNotStarting = "JobNotStarting"
	// ReasonClusterNotServing: a restore's data is installed, but its cluster has not been
	// Available at its size for a long while; the restore no longer holds OLM upgrades back.
	ReasonClusterNotServing = "ClusterNotServing"
	// ReasonRestoredDataDiffers: a restored cluster serves at its size, but its members do not
	// report the same keyspace (HashKV, compact revision, key count) at the restored revision;
	// the restore does not complete.
	ReasonRestoredDataDiffers = "RestoredDataDiffers"
)

// Condition reasons of EtcdRestore only.
const (
	// ReasonSourceNotFound: the snapshot, its EtcdBackup or a Secret it needs does not exist.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonWaitingForSource: the EtcdBackup named does not exist yet, or has taken no snapshot
	// yet; the restore waits for it, for a bounded time, then fails with SourceNotFound.
	ReasonWaitingForSource = "WaitingForSource"
	// ReasonTargetExists: mode New, and an EtcdCluster of the target's name exists already.
	ReasonTargetExists = "TargetExists"
	// ReasonTargetNotFound: mode InPlace, and the EtcdCluster to restore does not exist.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonTargetDeleted: the target EtcdCluster was deleted while it was being restored.
	ReasonTargetDeleted = "TargetDeleted"
	// ReasonTargetHeld: another EtcdRestore is restoring the same cluster.
	ReasonTargetHeld = "TargetHeld"
	// ReasonTargetPaused: the target is paused (spec.paused) and cannot carry out the cut-over.
	ReasonTargetPaused = "TargetPaused"
	// ReasonVersionTooOld: the target runs an older etcd than the snapshot was taken with.
	ReasonVersionTooOld = "VersionTooOld"
	// ReasonStorageTooSmall: the target's member claims are smaller than restoring the
	// snapshot needs (the snapshot, the data restored from it, etcd's first WAL segment).
	ReasonStorageTooSmall = "StorageTooSmall"
	// ReasonBackupRunning: an in-place restore waits for a backup of its cluster to finish.
	ReasonBackupRunning = "BackupRunning"
	// ReasonMaterializing: a point-in-time restore builds the keyspace at its target from a
	// snapshot and the archive.
	ReasonMaterializing = "Materializing"
	// ReasonPointNotRecoverable: the target of a point-in-time restore lies outside every
	// recoverable range of the archive, or in a gap (named in the message).
	ReasonPointNotRecoverable = "PointNotRecoverable"
)

// Reasons of the Upgradeable condition of the operator's OperatorCondition (OLM).
const (
	ReasonBackupOrRestoreRunning   = "BackupOrRestoreRunning"
	ReasonNoBackupOrRestoreRunning = "NoBackupOrRestoreRunning"
)

// AnnotationRecoverFrom, set by a user on an EtcdCluster whose quorum is lost for good, names
// the surviving member to recover it from (quorumLossRecovery policy Manual). The operator
// keeps a copy of that member's data, restarts it alone with its data, and grows the cluster
// back; writes that only the lost members had are gone.
const AnnotationRecoverFrom = "etcd.database.dev/recover-from"

// AnnotationLostMembers, set by a person on an EtcdCluster whose quorum is lost, lists the
// members (comma-separated names) whose machines they have checked are down. It is the
// operator's only evidence that a member whose node stopped answering the API server is not
// still serving: a node that stopped answering is not an etcd that stopped. Like
// AnnotationRecoverFrom it holds for the loss it was given for: set before the loss was
// observed, or on a cluster with a quorum, it is removed with an event.
const AnnotationLostMembers = "etcd.database.dev/lost-members"

// AnnotationRotateCA, set by a user on an EtcdCluster whose tls.provider is Operator, asks for
// its CA to be replaced now, without downtime (status.caRotation follows it). Its value is any
// token, such as a date: a rotation begins when it differs from the one the last rotation was
// started for, so the annotation can stay and a new value asks for a new rotation.
const AnnotationRotateCA = "etcd.database.dev/rotate-ca"
