package v1alpha1_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// invalidObjects is the admission contract: each object must be refused by the API server with
// a message that tells the user what is wrong.
var invalidObjects = []struct {
	name     string
	manifest string
	want     string
}{
	// EtcdCluster
	{"cluster size zero", cluster(`size: 0`), "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"},
	{"cluster size above nine", cluster(`size: 10`), "spec.size in body should be less than or equal to 9"},
	{"cluster version without patch", cluster(`version: "3.6"`), "spec.version in body should match"},
	{"cluster version with v prefix", cluster(`version: v3.6.16`), "spec.version in body should match"},
	{"cluster version too old", cluster(`version: 3.4.30`), "spec.version in body should match"},
	{"cluster repository not an image name", cluster(`repository: "Registry/Etcd"`), "spec.repository in body should match"},
	{"cluster repository digest too short", cluster(`repository: "registry.example/etcd@sha256:abc"`), "spec.repository in body should match"},
	{"cluster repository digest upper-case", cluster(`repository: "registry.example/etcd@sha256:` + strings.Repeat("A", 64) + `"`), "spec.repository in body should match"},
	{"cluster repository digest of another algorithm", cluster(`repository: "registry.example/etcd@sha512:` + strings.Repeat("a", 128) + `"`), "spec.repository in body should match"},
	{"cluster repository digest alone", cluster(`repository: "@sha256:` + strings.Repeat("a", 64) + `"`), "spec.repository in body should match"},
	{"cluster storage too small", cluster("storage:\n  size: 32Mi"), "storage.size must be at least 64Mi"},
	{"cluster quorum-loss recovery after below its floor", cluster("quorumLossRecovery:\n  policy: ForceNewCluster\n  after: 90s"), "quorumLossRecovery.after must be at least 2m"},
	{"cluster storage not a quantity", cluster("storage:\n  size: lots"), "spec.storage.size"},
	{"cluster ephemeral with storage class", cluster("storage:\n  ephemeral: true\n  storageClassName: fast"), "storage.storageClassName has no meaning with storage.ephemeral: true"},
	{"cluster retention policy unknown", cluster("storage:\n  retentionPolicy:\n    whenDeleted: Keep"), `spec.storage.retentionPolicy.whenDeleted: Unsupported value: "Keep"`},
	{"cluster tls secrets missing", cluster("tls:\n  provider: Secrets"), "tls.secrets is required when tls.provider is Secrets"},
	{"cluster tls cert-manager missing", cluster("tls:\n  provider: CertManager"), "tls.certManager is required when tls.provider is CertManager"},
	{"cluster tls secrets with operator provider", cluster("tls:\n  secrets: {peer: p, server: s, client: c}"), "tls.secrets is only used when tls.provider is Secrets"},
	{"cluster tls provider unknown", cluster("tls:\n  provider: Vault"), `spec.tls.provider: Unsupported value: "Vault"`},
	{"cluster tls secret name empty", cluster("tls:\n  provider: Secrets\n  secrets: {peer: '', server: s, client: c}"), "spec.tls.secrets.peer in body should be at least 1 chars long"},
	{"cluster cert-manager validity under an hour", cluster("tls:\n  provider: CertManager\n  certManager: {issuerRef: {name: ca}}\n  validity: 30m\n  renewBefore: 10m"), "cert-manager refuses certificates shorter than an hour"},
	{"cluster cert-manager renewal under 5m", cluster("tls:\n  provider: CertManager\n  certManager: {issuerRef: {name: ca}}\n  renewBefore: 1m"), "cert-manager refuses to renew closer to expiry than that"},
	{"cluster issuer kind unknown", cluster("tls:\n  provider: CertManager\n  certManager: {issuerRef: {name: ca, kind: Vault}}"), `issuerRef.kind must be Issuer or ClusterIssuer for group cert-manager.io`},
	{"cluster auth secret empty", cluster("auth:\n  rootSecretName: ''"), "spec.auth.rootSecretName in body should be at least 1 chars long"},
	{"cluster election timeout too short", cluster("tuning:\n  heartbeatIntervalMillis: 300\n  electionTimeoutMillis: 1000"), "tuning.electionTimeoutMillis must be at least 5 times tuning.heartbeatIntervalMillis"},
	{"cluster heartbeat too short", cluster("tuning:\n  heartbeatIntervalMillis: 5"), "spec.tuning.heartbeatIntervalMillis in body should be greater than or equal to 10"},
	{"cluster compaction mode unknown", cluster("tuning:\n  autoCompactionMode: daily"), `spec.tuning.autoCompactionMode: Unsupported value: "daily"`},
	{"cluster compaction retention not a duration", cluster("tuning:\n  autoCompactionRetention: one hour"), "spec.tuning.autoCompactionRetention in body should match"},
	{"cluster tls renewal as long as validity", cluster("tls: {validity: 720h, renewBefore: 720h}"), "tls.renewBefore must be shorter than tls.validity"},
	{"cluster tls renewal zero", cluster("tls: {renewBefore: 0s}"), "tls.renewBefore must be above 0"},
	{"cluster tls CA renewal zero", cluster("tls: {caRenewBefore: 0s}"), "tls.caRenewBefore must be above 0"},
	{"cluster tls CA renewal as long as the CA lives", cluster("tls: {validity: 720h, caRenewBefore: 7200h}"), "tls.caRenewBefore must be shorter than the CA's life"},
	{"cluster tls CA renewal with user Secrets", cluster("tls: {provider: Secrets, secrets: {peer: p, server: s, client: c}, caRenewBefore: 720h}"), "tls.caRenewBefore is only used when tls.provider is Operator"},
	{"cluster tls validity above ten years", cluster("tls: {validity: 87601h}"), "tls.validity must be at most 87600h"},
	{"cluster quota zero", cluster("tuning: {quotaBackendBytes: 0}"), "tuning.quotaBackendBytes must be above 0"},
	{"cluster reserved pod label", cluster("podTemplate:\n  metadata:\n    labels:\n      etcd.database.dev/member: x"), "label keys with the etcd.database.dev/ prefix are reserved for the operator"},
	{"cluster client service ExternalName", cluster("clientService: {type: ExternalName}"), `spec.clientService.type: Unsupported value: "ExternalName"`},
	{"cluster client service reserved annotation", cluster("clientService:\n  annotations:\n    etcd.database.dev/user-annotations: x"), "annotation keys with the etcd.database.dev/ prefix are reserved for the operator"},
	{"cluster quorum policy unknown", cluster("quorumLossRecovery:\n  policy: Auto"), `spec.quorumLossRecovery.policy: Unsupported value: "Auto"`},
	{"cluster defrag threshold zero", cluster("defragmentation:\n  thresholdPercent: 0"), "spec.defragmentation.thresholdPercent in body should be greater than or equal to 1"},
	{"cluster corruption check policy unknown", cluster("corruptionCheck:\n  policy: Paused"), `spec.corruptionCheck.policy: Unsupported value: "Paused"`},
	{"cluster corruption check every 30s", cluster("corruptionCheck:\n  interval: 30s"), "corruptionCheck.interval must be at least 1m"},
	{"cluster name too long", named("EtcdCluster", strings.Repeat("a", 51), "spec: {}"), "an EtcdCluster name must be a DNS label of at most 50 characters"},
	{"cluster name starts with a digit", named("EtcdCluster", "1st", "spec: {}"), "an EtcdCluster name must be a DNS label of at most 50 characters"},

	// EtcdBackup
	{"backup without destination", backup("clusterName: example"), "spec.destination: Required value"},
	{"backup without cluster", backup("destination: {pvc: {claimName: b}}"), "spec.clusterName: Required value"},
	{"backup to both s3 and pvc", backup("clusterName: e\ndestination:\n  pvc: {claimName: b}\n  s3: {bucket: bkt, credentialsSecretName: c}"), "set exactly one of s3 or pvc"},
	{"backup to nowhere", backup("clusterName: e\ndestination: {}"), "set exactly one of s3 or pvc"},
	{"backup bucket name invalid", backup("clusterName: e\ndestination:\n  s3: {bucket: My_Bucket, credentialsSecretName: c}"), "spec.destination.s3.bucket in body should match"},
	{"backup s3 service account name invalid", backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, serviceAccountName: Not_A_Name}"), "spec.destination.s3.serviceAccountName in body should match"},
	{"backup endpoint without scheme", backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'minio:9000'}"), "spec.destination.s3.endpoint in body should match"},
	{"backup endpoint plain http without opt-in", backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'http://minio:9000'}"), "an http:// endpoint sends the credentials and the snapshot"},
	{"backup endpoint plain http opted out", backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'http://minio:9000', allowPlainHTTP: false}"), "set allowPlainHTTP: true"},
	{"restore endpoint plain http without opt-in", restore("source:\n  location: {key: k, s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'http://minio:9000'}}\ntarget: {mode: InPlace, clusterName: r}"), "an http:// endpoint sends the credentials"},
	{"backup prefix absolute", backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, prefix: /etcd}"), "s3.prefix must not start with /"},
	{"backup provision without size", backup("clusterName: e\ndestination:\n  pvc: {claimName: b, provision: {storageClassName: slow}}"), "spec.destination.pvc.provision.size: Required value"},
	{"backup provision too small", backup("clusterName: e\ndestination:\n  pvc: {claimName: b, provision: {size: 1Mi}}"), "pvc.provision.size must be at least 64Mi"},
	{"backup provision class empty", backup("clusterName: e\ndestination:\n  pvc: {claimName: b, provision: {size: 1Gi, storageClassName: ''}}"), "spec.destination.pvc.provision.storageClassName in body should be at least 1 chars long"},
	{"restore location provisions", restore("source:\n  location: {key: k, pvc: {claimName: c, provision: {size: 1Gi}}}\ntarget: {mode: InPlace, clusterName: r}"), "pvc.provision applies to a backup's destination"},
	{"backup pvc path escapes", backup("clusterName: e\ndestination:\n  pvc: {claimName: b, subPath: a/../../etc}"), "pvc.subPath must be a relative path without '..'"},
	{"backup retention without schedule", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nretention: {maxCount: 3}"), "retention applies to scheduled backups only: set schedule too"},
	{"backup suspend without schedule", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nsuspend: true"), "suspend applies to scheduled backups only: set schedule too"},
	{"backup verify every nth without n", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nverify: {policy: EveryNthRun}"), "verify.everyNthRun is set with policy EveryNthRun, and only then"},
	{"backup verify n with always", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nverify: {policy: Always, everyNthRun: 3}"), "verify.everyNthRun is set with policy EveryNthRun, and only then"},
	{"backup verify every nth one-shot", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {policy: EveryNthRun, everyNthRun: 3}"), "verify.policy EveryNthRun applies to scheduled backups only"},
	{"backup verify n past history", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nverify: {policy: EveryNthRun, everyNthRun: 11}"), "verify.everyNthRun must be at most historyLimit"},
	{"backup verify policy unknown", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {policy: Sometimes}"), "spec.verify.policy: Unsupported value"},
	{"backup verify max recovery time zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {maxRecoveryTime: 0s}"), "verify.maxRecoveryTime must be above 0"},
	{"backup verify max recovery time negative", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {maxRecoveryTime: -5m}"), "verify.maxRecoveryTime must be above 0"},
	{"backup verify max recovery time not a duration", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {maxRecoveryTime: ten minutes}"), "spec.verify.maxRecoveryTime"},
	{"backup schedule not cron", scheduled("every hour"), "schedule must be five cron fields separated by single spaces"},
	{"backup schedule with six fields", scheduled("0 0 * * * *"), "schedule must be five cron fields separated by single spaces"},
	{"backup schedule with time zone", scheduled("TZ=Europe/Paris 0 3 * * *"), "schedule must be five cron fields separated by single spaces"},
	{"backup schedule every day unit", scheduled("@every 1d"), "schedule must be five cron fields separated by single spaces"},
	{"backup schedule minute 60", scheduled("60 * * * *"), "schedule: the minute (1st field) must be"},
	{"backup schedule minute 61 in a list", scheduled("0,61 * * * *"), "schedule: the minute (1st field) must be"},
	{"backup schedule minute range reversed", scheduled("50-10 * * * *"), "schedule: the minute (1st field) must be"},
	{"backup schedule minute step zero", scheduled("*/0 * * * *"), "schedule: the minute (1st field) must be"},
	{"backup schedule hour 24", scheduled("0 24 * * *"), "schedule: the hour (2nd field) must be"},
	{"backup schedule hour range to 24", scheduled("0 22-24 * * *"), "schedule: the hour (2nd field) must be"},
	{"backup schedule day 0", scheduled("0 0 0 * *"), "schedule: the day of month (3rd field) must be"},
	{"backup schedule day 32", scheduled("0 0 32 * *"), "schedule: the day of month (3rd field) must be"},
	{"backup schedule month 13", scheduled("0 0 1 13 *"), "schedule: the month (4th field) must be"},
	{"backup schedule month names reversed", scheduled("0 0 1 DEC-JAN *"), "schedule: the month (4th field) must be"},
	{"backup schedule weekday 7", scheduled("0 0 * * 7"), "schedule: the day of week (5th field) must be"},
	{"backup schedule weekday name in month", scheduled("0 0 * MON *"), "schedule: the month (4th field) must be"},
	{"backup empty retention", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nretention: {}"), "retention needs maxCount, maxAge or both"},
	{"backup retention count zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nretention: {maxCount: 0}"), "spec.retention.maxCount in body should be greater than or equal to 1"},
	{"backup retention max age zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nretention: {maxAge: 0s}"), "retention.maxAge must be above 0"},
	{"backup name too long", named("EtcdBackup", strings.Repeat("b", 64), "spec: {clusterName: e, destination: {pvc: {claimName: b}}}"), "an EtcdBackup name must be at most 63 characters"},
	{"backup history limit zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nhistoryLimit: 0"), "spec.historyLimit in body should be greater than or equal to 1"},
	{"backup continuous without a schedule", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\ncontinuous: {}"), "continuous applies to scheduled backups only"},
	{"backup continuous segment too short", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\ncontinuous: {segmentDuration: 1s}"), "continuous.segmentDuration must be from 5s to 1h"},
	{"backup continuous segment too small", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\ncontinuous: {segmentMaxBytes: 1024}"), "spec.continuous.segmentMaxBytes in body should be greater than or equal to 65536"},
	{"backup continuous max lag zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\ncontinuous: {maxLag: 0s}"), "continuous.maxLag must be above 0"},
	{"backup encryption without its keys", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nencryption: {}"), "encryption needs secretName, the Secret holding the age keys"},
	{"backup encryption Secret name empty", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nencryption: {secretName: ''}"), "spec.encryption.secretName in body should be at least 1 chars long"},
	{"restore decryption without its keys", restore("source: {backup: {name: b}, encryption: {}}\ntarget: {mode: InPlace, clusterName: r}"), "encryption needs secretName, the Secret holding the age keys"},

	// EtcdRestore
	{"restore without mode", restore("source: {backup: {name: b}}\ntarget: {clusterName: r}"), "spec.target.mode: Required value"},
	{"restore mode unknown", restore("source: {backup: {name: b}}\ntarget: {mode: Replace, clusterName: r}"), `spec.target.mode: Unsupported value: "Replace"`},
	{"restore new without cluster spec", restore("source: {backup: {name: b}}\ntarget: {mode: New, clusterName: r}"), "target.cluster (the new EtcdCluster's spec) is required when target.mode is New"},
	{"restore in place with cluster spec", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r, cluster: {}}"), "target.cluster must be empty when target.mode is InPlace"},
	{"restore from two sources", restore("source:\n  backup: {name: b}\n  location: {key: k, pvc: {claimName: c}}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of source.backup, source.location or source.pointInTime"},
	{"restore from no source", restore("source: {}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of source.backup, source.location or source.pointInTime"},
	{"restore from a backup and a point in time", restore("source:\n  backup: {name: b}\n  pointInTime: {backup: b, revision: 5}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of source.backup, source.location or source.pointInTime"},
	{"restore to a point with neither revision nor time", restore("source:\n  pointInTime: {backup: b}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of pointInTime.revision or pointInTime.time"},
	{"restore to a point with both revision and time", restore("source:\n  pointInTime: {backup: b, revision: 5, time: '2026-03-01T14:02:00Z'}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of pointInTime.revision or pointInTime.time"},
	{"restore to revision zero", restore("source:\n  pointInTime: {backup: b, revision: 0}\ntarget: {mode: InPlace, clusterName: r}"), "spec.source.pointInTime.revision in body should be greater than or equal to 1"},
	{"restore location without storage", restore("source:\n  location: {key: k}\ntarget: {mode: InPlace, clusterName: r}"), "set exactly one of s3 or pvc"},
	{"restore checksum malformed", restore("source:\n  location: {key: k, sha256: abc, pvc: {claimName: c}}\ntarget: {mode: InPlace, clusterName: r}"), "spec.source.location.sha256 in body should match"},
	{"restore key escapes", restore("source:\n  location: {key: ../k, pvc: {claimName: c}}\ntarget: {mode: InPlace, clusterName: r}"), "key must be a relative path without '..'"},
	{"restore backup uri scheme", restore("source: {backup: {name: b, uri: 'http://x/y'}}\ntarget: {mode: InPlace, clusterName: r}"), "spec.source.backup.uri in body should match"},
	{"restore cluster name invalid", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: Prod}"), "spec.target.clusterName in body should match"},
	{"restore name too long", named("EtcdRestore", strings.Repeat("r", 64), "spec:\n  source: {backup: {name: b}}\n  target: {mode: InPlace, clusterName: r}"), "an EtcdRestore name must be at most 63 characters"},
	{"restore revision bump a word", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}\nrevisionBump: Always"), "spec.revisionBump in body should match"},
	{"restore revision bump zero", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}\nrevisionBump: '0'"), "spec.revisionBump in body should match"},
	{"restore revision bump past int64", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}\nrevisionBump: '9999999999999999999'"), "spec.revisionBump in body should match"},
	{"restore new cluster spec invalid", restore("source: {backup: {name: b}}\ntarget: {mode: New, clusterName: r, cluster: {size: 12}}"), "spec.target.cluster.size in body should be less than or equal to 9"},
}

func TestInvalidObjectsAreRejectedAtAdmission(t *testing.T) {
	for _, tc := range invalidObjects {
		t.Run(tc.name, func(t *testing.T) {
			expectRejected(t, k8sClient.Create(ctx(t), object(t, tc.manifest)), tc.want)
		})
	}
}

func cluster(spec string) string { return named("EtcdCluster", "", "spec:\n"+indent(spec)) }
func backup(spec string) string  { return named("EtcdBackup", "", "spec:\n"+indent(spec)) }
func restore(spec string) string { return named("EtcdRestore", "", "spec:\n"+indent(spec)) }

// scheduled is a scheduled EtcdBackup, valid but for its schedule.
func scheduled(schedule string) string {
	return backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: " + strconv.Quote(schedule))
}

func named(kind, name, body string) string {
	m := "kind: " + kind + "\n"
	if name != "" {
		m += fmt.Sprintf("metadata: {name: %q}\n", name)
	}
	return m + body
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// A repository pinned by digest names one image, run as it is for spec.version: what a
// disconnected install mirrors by digest. With or without a registry port, and with a tag beside
// the digest (which then names the version the digest is).
func TestRepositoryPinnedByDigestIsAccepted(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, repository := range []string{
		"registry.example/etcd" + digest,
		"127.0.0.1:5000/mirror/etcd" + digest,
		"registry.example/etcd:v3.6.16" + digest,
	} {
		create(t, object(t, cluster("repository: "+strconv.Quote(repository))))
	}
}

// The refusal of http:// endpoints is an opt-in, not a ban: a trusted in-cluster server works.
func TestPlainHTTPEndpointIsAcceptedWhenOptedIn(t *testing.T) {
	create(t, object(t, backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'http://minio:9000', allowPlainHTTP: true}")))
	create(t, object(t, backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'https://minio:9000'}")))
}

// Without a credentials Secret a bucket is reached with the pod's own AWS identity, the
// ServiceAccount's role or the SDK's default chain.
func TestBackupWithThePodsAWSIdentityIsAccepted(t *testing.T) {
	create(t, object(t, backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, serviceAccountName: etcd-backups}")))
	create(t, object(t, restore("source: {location: {s3: {bucket: bkt}, key: k}}\ntarget: {mode: InPlace, clusterName: prod}")))
}

// A destination claim the operator provisions needs a size; the class is optional.
func TestBackupToAProvisionedClaimIsAccepted(t *testing.T) {
	create(t, object(t, backup("clusterName: e\ndestination:\n  pvc: {claimName: b, provision: {size: 1Gi}}")))
	create(t, object(t, backup("clusterName: e\ndestination:\n  pvc: {claimName: b, provision: {size: 64Mi, storageClassName: standard}}")))
}

// spec.verify: {} verifies every run (Always is its default); EveryNthRun within the history
// a scheduled backup keeps is accepted.
func TestCorruptionChecksAreOnByDefaultEveryFourHours(t *testing.T) {
	c := object(t, cluster("size: 3"))
	create(t, c)
	policy, _, _ := unstructured.NestedString(c.Object, "spec", "corruptionCheck", "policy")
	interval, _, _ := unstructured.NestedString(c.Object, "spec", "corruptionCheck", "interval")
	if policy != "Enabled" || interval != "4h0m0s" {
		t.Errorf("corruptionCheck defaults to policy %q interval %q, want Enabled every 4h", policy, interval)
	}
	create(t, object(t, cluster("corruptionCheck: {policy: Disabled, interval: 1m}")))
}

func TestBackupVerifyIsAcceptedAndDefaultsToAlways(t *testing.T) {
	empty := object(t, backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {}"))
	create(t, empty)
	if policy, _, _ := unstructured.NestedString(empty.Object, "spec", "verify", "policy"); policy != "Always" {
		t.Errorf("verify: {} has policy %q, want the default Always", policy)
	}
	create(t, object(t, backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nhistoryLimit: 20\nverify: {policy: EveryNthRun, everyNthRun: 20}")))
	create(t, object(t, backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nverify: {maxRecoveryTime: 1ms}")))
}

// Encrypted backups name the Secret of their keys; a restore may name another.
func TestEncryptionWithASecretOfKeysIsAccepted(t *testing.T) {
	create(t, object(t, backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nencryption: {secretName: backup-keys}")))
	create(t, object(t, restore("source: {backup: {name: b}, encryption: {secretName: restore-keys}}\ntarget: {mode: InPlace, clusterName: prod}")))
}
