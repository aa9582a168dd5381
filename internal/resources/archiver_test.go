package resources

import (
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// The archiver reads the cluster and writes the series as a backup run of the same EtcdBackup
// does, so it is given exactly what that run's Job is (its volumes, mounts, Secrets by
// reference, service account, pod security and placement) and a configuration naming the same
// cluster and series, without retention, with the segments' bounds, the restore mark and the
// address of its status; one replica, replaced by stopping it first, ready once /healthz
// answers on the status port; selected apart from the backup's Jobs.
func TestArchiverDeploymentReadsAndWritesAsTheBackupsRunsDo(t *testing.T) {
	for name, tc := range map[string]struct {
		cluster func(*etcdv1alpha1.EtcdCluster)
		dest    etcdv1alpha1.StorageLocation
		enc     *etcdv1alpha1.SnapshotEncryption
	}{
		"TLS, a bucket with credentials and a CA, encrypted": {
			cluster: func(c *etcdv1alpha1.EtcdCluster) { c.Spec.TLS = &etcdv1alpha1.TLSSpec{} },
			dest: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: "snaps", Prefix: "p/", CredentialsSecretName: "s3-creds", CASecretName: "s3-ca", ServiceAccountName: "etcd-backups",
			}},
			enc: &etcdv1alpha1.SnapshotEncryption{SecretName: "age-keys"},
		},
		"auth without TLS, a claim": {
			cluster: func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Auth = &etcdv1alpha1.AuthSpec{} },
			dest:    etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups", SubPath: "etcd"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := testCluster()
			tc.cluster(c)
			c.Status.CorruptMembers = []etcdv1alpha1.CorruptMember{{Name: "prod-bad", ID: "1f"}}
			b := testBackup(tc.dest)
			b.Spec.Encryption = tc.enc
			pods := PodSettings{Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy"}}}
			d, err := ArchiverDeployment(b, c, "registry/etcd-operator:v1", 5*time.Minute, 16<<20, "restore-3", pods)
			if err != nil {
				t.Fatal(err)
			}
			run, err := BackupJob(b, c, "registry/etcd-operator:v1", time.Now(), pods)
			if err != nil {
				t.Fatal(err)
			}

			if d.Name != "nightly-archiver" || d.Name != ArchiverName(b.Name) || d.Namespace != "db" || d.Labels[LabelCluster] != "prod" {
				t.Errorf("deployment %s/%s labels %v", d.Namespace, d.Name, d.Labels)
			}
			if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("replicas %d, strategy %s: want one, never two at once", *d.Spec.Replicas, d.Spec.Strategy.Type)
			}
			podLabels := labels.Set(d.Spec.Template.Labels)
			selector := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
			if !selector.Matches(podLabels) || podLabels[LabelBackup] != "nightly" || podLabels[LabelComponent] != ComponentArchiver || podLabels[LabelCluster] != "" {
				t.Errorf("pod labels %v, selector %v", podLabels, selector)
			}
			if selector.Matches(labels.Set(run.Spec.Template.Labels)) {
				t.Errorf("the archiver's selector %v takes in the backup Job's pods %v", selector, run.Spec.Template.Labels)
			}

			pod, runPod := d.Spec.Template.Spec, run.Spec.Template.Spec
			archiver, runner := pod.Containers[0], runPod.Containers[0]
			if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 || archiver.Name != ArchiverContainer || !slices.Equal(archiver.Args, []string{"agent", "archive"}) {
				t.Errorf("containers %+v", pod.Containers)
			}
			if pod.RestartPolicy != corev1.RestartPolicyAlways {
				t.Errorf("restart policy %s", pod.RestartPolicy)
			}
			sameAsTheRun := map[string][2]any{
				"volumes":         {pod.Volumes, runPod.Volumes},
				"mounts":          {archiver.VolumeMounts, runner.VolumeMounts},
				"secret env":      {archiver.Env[1:], runner.Env[1:]},
				"service account": {pod.ServiceAccountName, runPod.ServiceAccountName},
				"pod security":    {pod.SecurityContext, runPod.SecurityContext},
				"security":        {archiver.SecurityContext, runner.SecurityContext},
				"placement":       {pod.Affinity, runPod.Affinity},
				"API token":       {pod.AutomountServiceAccountToken, runPod.AutomountServiceAccountToken},
			}
			for what, pair := range sameAsTheRun {
				if !reflect.DeepEqual(pair[0], pair[1]) {
					t.Errorf("the archiver's %s %+v, the backup run's %+v", what, pair[0], pair[1])
				}
			}

			cfg, runCfg := configOf(t, archiver), configOf(t, runner)
			if cfg.SegmentDuration != 5*time.Minute || cfg.SegmentMaxBytes != 16<<20 || cfg.RestoreMark != "restore-3" || cfg.StatusAddr != ":8080" {
				t.Errorf("archive configuration %+v", cfg)
			}
			if cfg.MaxCount != 0 || cfg.MaxAge != 0 || cfg.LastBackup != "" {
				t.Errorf("the archiver was given retention %+v: its snapshots start lineages and are pruned by the backup's runs", cfg)
			}
			cfg.SegmentDuration, cfg.SegmentMaxBytes, cfg.RestoreMark, cfg.StatusAddr = 0, 0, "", ""
			runCfg.MaxCount, runCfg.MaxAge, runCfg.LastBackup = 0, 0, ""
			if !reflect.DeepEqual(cfg, runCfg) {
				t.Errorf("the archiver reads and writes %+v, the backup run %+v", cfg, runCfg)
			}

			if len(archiver.Ports) != 1 || archiver.Ports[0].ContainerPort != ArchiverStatusPort || archiver.Ports[0].Name != ArchiverStatusPortName {
				t.Errorf("ports %+v", archiver.Ports)
			}
			if p := archiver.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != ArchiverStatusPortName {
				t.Errorf("readiness %+v, want /healthz on the status port", p)
			}
			if limit, floor := archiver.Resources.Limits[corev1.ResourceMemory], archiverMemory(16<<20); limit.Cmp(floor) != 0 || limit.Value() <= 3*16<<20 {
				t.Errorf("memory limit %s, want room for segments of 16Mi", limit.String())
			}
			if archiver.TerminationMessagePath != jobspec.TerminationMessagePath {
				t.Errorf("the archiver reports its last error as any agent, through %s", jobspec.TerminationMessagePath)
			}
		})
	}
}
