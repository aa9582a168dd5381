package resources

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// The point-in-time Job is a verify Job's pod with a replay for its last step: the scratch
// member of the cluster's etcd version serves the fetched base on loopback, and the replay,
// alone of its containers, may write to the destination, with the backup's keys and
// credentials. Its configuration names the series (the backup's cluster, not the restore's),
// the target, the snapshots to leave out and the restore the result is named after.
func TestPointInTimeJobReplaysInItsOwnPodAndWritesOnlyFromTheReplay(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		dest       etcdv1alpha1.StorageLocation
		encryption *etcdv1alpha1.SnapshotEncryption
		pit        PointInTime
		// secrets are those the fetch and the replay take by reference; mounted, the volumes
		// both mount (the destination read-only in the fetch).
		secrets []string
		mounted []string
	}{
		"S3 with keys, a CA and credentials, at a time": {
			dest: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: "snaps", Prefix: "p/", CredentialsSecretName: "s3-creds", CASecretName: "s3-ca", ServiceAccountName: "etcd-backups",
			}},
			encryption: &etcdv1alpha1.SnapshotEncryption{SecretName: "age-keys"},
			pit: PointInTime{Restore: "undo-friday", RestoreUID: "9d1c", Time: &at, ExcludeKeys: []string{"db/prod/bad.db"},
				Recorded: []jobspec.Snapshot{{Key: "db/prod/good.db", SHA256: "abc", Revision: 90}}},
			secrets: []string{"s3-creds"},
			mounted: []string{jobspec.StorageCADir, jobspec.EncryptionKeysDir},
		},
		"a claim, at a revision": {
			dest:    etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups", SubPath: "etcd"}},
			pit:     PointInTime{Restore: "undo-friday", RestoreUID: "9d1c", Revision: 1234},
			mounted: []string{jobspec.ClaimDir},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := testCluster()
			c.Name = "restored" // the restore's target: the series is still the backup's cluster's
			b := testBackup(tc.dest)
			b.Spec.Encryption = tc.encryption
			job, err := PointInTimeJob(b, c, tc.pit, "registry/etcd-operator:v1", EtcdImages{Repository: "etcd"}, PodSettings{})
			if err != nil {
				t.Fatal(err)
			}
			checkAgentJob(t, job)
			if job.Name != "undo-friday-pitr" || job.Name != PointInTimeJobName(tc.pit.Restore) || job.Namespace != "db" || job.Labels[LabelRestore] != "undo-friday" {
				t.Errorf("job %s/%s labels %v", job.Namespace, job.Name, job.Labels)
			}
			pod := job.Spec.Template.Spec
			containers := map[string]corev1.Container{}
			var names []string
			for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
				names = append(names, ctr.Name)
				containers[ctr.Name] = ctr
			}
			if want := []string{PointInTimeFetchContainer, PointInTimeEtcdutlContainer, PointInTimeEtcdContainer, PointInTimeReplayContainer}; !slices.Equal(names, want) {
				t.Fatalf("containers %v, want %v", names, want)
			}
			fetch, member, replay := containers[PointInTimeFetchContainer], containers[PointInTimeEtcdContainer], containers[PointInTimeReplayContainer]
			if !slices.Equal(fetch.Args, []string{"agent", "pitr-fetch"}) || !slices.Equal(replay.Args, []string{"agent", "pitr-replay"}) {
				t.Errorf("fetch runs %v, replay %v", fetch.Args, replay.Args)
			}
			if p := member.RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways || !strings.Contains(member.Image, c.Spec.Version) {
				t.Errorf("the scratch member must be a native sidecar of the cluster's version: %v %s", p, member.Image)
			}
			for _, arg := range slices.Concat(jobspec.VerifyEtcdTLSArgs(jobspec.VerifyTLSDir), scratchAutoCompaction, scratchRequestLimits,
				[]string{"--listen-client-urls=" + jobspec.VerifyClientURL, "--quota-backend-bytes=2147483648"}) {
				if !slices.Contains(member.Args, arg) {
					t.Errorf("the scratch member's args %v lack %s", member.Args, arg)
				}
			}

			cfg := configOf(t, replay)
			if fetched := configOf(t, fetch); fetched.RestoreUID != cfg.RestoreUID || fetched.TargetRevision != cfg.TargetRevision {
				t.Errorf("fetch and replay configured apart: %+v, %+v", fetched, cfg)
			}
			if cfg.Cluster != "prod" || cfg.Namespace != "db" || cfg.Backup != "nightly" || cfg.BackupUID != string(b.UID) {
				t.Errorf("configuration names series %s/%s/%s_%s, want the backup's", cfg.Namespace, cfg.Cluster, cfg.Backup, cfg.BackupUID)
			}
			if cfg.TargetRevision != tc.pit.Revision || !equalTimes(cfg.TargetTime, tc.pit.Time) || cfg.RestoreUID != "9d1c" ||
				!slices.Equal(cfg.ExcludeKeys, tc.pit.ExcludeKeys) || !slices.Equal(cfg.Recorded, tc.pit.Recorded) ||
				!slices.Equal(cfg.Endpoints, []string{jobspec.VerifyClientURL}) || (cfg.Encryption == nil) != (tc.encryption == nil) {
				t.Errorf("configuration %+v for %+v", cfg, tc.pit)
			}

			for _, ctr := range []corev1.Container{fetch, replay} {
				var secrets []string
				for _, e := range ctr.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !slices.Contains(secrets, e.ValueFrom.SecretKeyRef.Name) {
						secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
					}
					if e.Name != jobspec.ConfigEnv && e.Value != "" {
						t.Errorf("%s has %s as a value", ctr.Name, e.Name)
					}
				}
				if !slices.Equal(secrets, tc.secrets) {
					t.Errorf("%s takes Secrets %v, want %v", ctr.Name, secrets, tc.secrets)
				}
				mounts := map[string]corev1.VolumeMount{}
				for _, m := range ctr.VolumeMounts {
					mounts[m.MountPath] = m
				}
				for _, path := range tc.mounted {
					m, ok := mounts[path]
					if !ok {
						t.Errorf("%s does not mount %s: %v", ctr.Name, path, ctr.VolumeMounts)
					}
					if path == jobspec.ClaimDir && m.ReadOnly != (ctr.Name == PointInTimeFetchContainer) {
						t.Errorf("%s mounts the destination read-only %v: only the replay writes", ctr.Name, m.ReadOnly)
					}
				}
				if m := mounts[jobspec.VerifyScratchDir]; m.Name == "" || m.ReadOnly != (ctr.Name == PointInTimeReplayContainer) {
					t.Errorf("%s mounts the scratch directory %+v: the fetch writes it, the replay reads it", ctr.Name, m)
				}
			}
			if want := storageServiceAccount(tc.dest); pod.ServiceAccountName != want {
				t.Errorf("runs as %q, want %q", pod.ServiceAccountName, want)
			}
			if limit := replay.Resources.Limits[corev1.ResourceMemory]; limit.Cmp(pointInTimeReplayMemory) != 0 {
				t.Errorf("the replay's memory limit %s, want room for a decoded segment, %s", limit.String(), pointInTimeReplayMemory.String())
			}
		})
	}
}

func configOf(t *testing.T, ctr corev1.Container) jobspec.JobConfig {
	t.Helper()
	var cfg jobspec.JobConfig
	for _, e := range ctr.Env {
		if e.Name == jobspec.ConfigEnv {
			if err := json.Unmarshal([]byte(e.Value), &cfg); err != nil {
				t.Fatal(err)
			}
			return cfg
		}
	}
	t.Fatalf("%s has no %s", ctr.Name, jobspec.ConfigEnv)
	return cfg
}

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
