package resources

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
)

func testBackup(dest etcdv1alpha1.StorageLocation) *etcdv1alpha1.EtcdBackup {
	return &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "db", UID: "3f9a1c20-7b4e-4d6a-9e15-c2b8d0f4a761"},
		Spec: etcdv1alpha1.EtcdBackupSpec{
			ClusterName: "prod", Destination: dest,
			Retention: &etcdv1alpha1.BackupRetention{MaxCount: ptrInt32(3), MaxAge: &metav1.Duration{Duration: time.Hour}},
		},
	}
}

func ptrInt32(v int32) *int32 { return &v }

func TestBackupJobPassesCredentialsByReferenceOnly(t *testing.T) {
	c := testCluster()
	c.Spec.TLS = &etcdv1alpha1.TLSSpec{}
	b := testBackup(etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
		Bucket: "snaps", Prefix: "p/", Endpoint: "https://s3.example", CredentialsSecretName: "s3-creds", CASecretName: "s3-ca",
	}})
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	job, err := BackupJob(b, c, "registry/etcd-operator:v1", at, []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy"}})
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "nightly-20261122t030000" || job.Namespace != "db" || job.Labels[LabelBackup] != "nightly" {
		t.Errorf("job %s/%s labels %v", job.Namespace, job.Name, job.Labels)
	}
	pod := job.Spec.Template.Spec
	ctr := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	for _, name := range []string{agent.AccessKeyIDEnv, agent.SecretAccessKeyEnv, agent.SessionTokenEnv} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "s3-creds" {
			t.Errorf("%s must come from Secret s3-creds, not a value: %+v", name, e)
		}
	}
	if env["HTTPS_PROXY"].Value != "http://proxy" {
		t.Errorf("proxy settings not passed on: %v", ctr.Env)
	}
	var cfg agent.JobConfig
	if err := json.Unmarshal([]byte(env[agent.ConfigEnv].Value), &cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.TLS || cfg.Cluster != "prod" || cfg.MaxCount != 3 || cfg.MaxAge != time.Hour ||
		len(cfg.Endpoints) != 1 || !strings.HasPrefix(cfg.Endpoints[0], "https://prod-client.db.svc") || cfg.Storage.S3.Bucket != "snaps" {
		t.Errorf("agent configuration %+v", cfg)
	}
	// The agent names the snapshots after the EtcdBackup, and prunes only those.
	if cfg.Namespace != "db" || cfg.Backup != "nightly" || cfg.BackupUID != "3f9a1c20-7b4e-4d6a-9e15-c2b8d0f4a761" {
		t.Errorf("agent configuration %+v: want the EtcdBackup's namespace, name and UID", cfg)
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if mounts[agent.EtcdTLSDir] == "" || mounts[agent.StorageCADir] == "" {
		t.Errorf("client certificate and storage CA must be mounted: %v", mounts)
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName != "prod-client-tls" && v.Secret.SecretName != "s3-ca" {
			t.Errorf("unexpected Secret mounted: %s", v.Secret.SecretName)
		}
	}
}

func TestAgentJobIsRestrictedAndFailsFastOnPermanentErrors(t *testing.T) {
	b := testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups", SubPath: "etcd"}})
	job, err := BackupJob(b, testCluster(), "img", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template.Spec
	sc, psc := pod.Containers[0].SecurityContext, pod.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser == 0 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("not restricted: pod %+v container %+v", psc, sc)
	}
	if *pod.AutomountServiceAccountToken || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the agent needs no API token and must not restart in place: %+v", pod)
	}
	rules := job.Spec.PodFailurePolicy.Rules
	if len(rules) != 1 || rules[0].Action != "FailJob" || rules[0].OnExitCodes.Values[0] != agent.ExitPermanent {
		t.Errorf("a permanent failure must fail the Job at once: %+v", rules)
	}
	if pod.Volumes[0].PersistentVolumeClaim.ClaimName != "backups" || pod.Containers[0].VolumeMounts[0].MountPath != agent.ClaimDir {
		t.Errorf("claim not mounted at %s: %+v", agent.ClaimDir, pod.Volumes)
	}
	if pod.Containers[0].TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("the report is the termination message file")
	}
}

func TestBackupJobNamesFitAndDifferPerRun(t *testing.T) {
	long := strings.Repeat("b", 253)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a, b := BackupJobName(long, at), BackupJobName(long, at.Add(time.Minute))
	if len(a) > 63 || a == b || a != BackupJobName(long, at) {
		t.Errorf("names %q, %q: want ≤ 63 characters, one per run, stable", a, b)
	}
	if BackupJobName(long, at) == BackupJobName(strings.Repeat("b", 252)+"c", at) {
		t.Errorf("two backups whose names differ late share a Job name")
	}
}

// Only members are members: the client and peer Services and the disruption budget must never
// select an agent pod, or a drain during a backup may evict a member the budget thought spare.
func TestAgentPodsAreNotSelectedAsMembers(t *testing.T) {
	c := testCluster()
	backup, err := BackupJob(testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}), c, "img", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, c, "prod-seed",
		RestoreSource{Storage: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}}, "img", "etcd", nil)
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := metav1.LabelSelectorAsSelector(PodDisruptionBudget(c, 3).Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	selectors := map[string]labels.Selector{
		"client Service": labels.SelectorFromSet(ClientService(c).Spec.Selector),
		"peer Service":   labels.SelectorFromSet(PeerService(c).Spec.Selector),
		"budget":         pdb,
	}
	member := MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16"}, "etcd", nil)
	for what, sel := range selectors {
		if !sel.Matches(labels.Set(member.Labels)) {
			t.Errorf("the %s does not select member pod labels %v", what, member.Labels)
		}
		for job, tmpl := range map[string]map[string]string{"backup": backup.Spec.Template.Labels, "restore": restore.Spec.Template.Labels} {
			if sel.Matches(labels.Set(tmpl)) {
				t.Errorf("the %s selects the %s Job's pods (labels %v)", what, job, tmpl)
			}
		}
	}
	if backup.Labels[LabelCluster] != "prod" || restore.Labels[LabelCluster] != "prod" {
		t.Errorf("the Jobs themselves still say which cluster they serve: %v, %v", backup.Labels, restore.Labels)
	}
}

// The manager caches, of these kinds, only objects with the ManagedBy label: whatever a
// builder makes without it the operator would create and then never see again. A pod
// template's own labels cannot take it away.
func TestEveryObjectMadeCarriesTheManagedByLabel(t *testing.T) {
	c := testCluster()
	c.Spec.PodTemplate.Metadata.Labels = map[string]string{LabelManagedBy: "someone-else"}
	backup, err := BackupJob(testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}), c, "img", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, c, "prod-seed",
		RestoreSource{Storage: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}}, "img", "etcd", nil)
	if err != nil {
		t.Fatal(err)
	}
	member := MemberSpec{Name: "prod-abcde", Version: "3.6.16"}
	made := map[string]map[string]string{
		"member pod":          MemberPod(c, member, "etcd", nil).Labels,
		"member claim":        MemberPVC(c, member).Labels,
		"peer Service":        PeerService(c).Labels,
		"client Service":      ClientService(c).Labels,
		"disruption budget":   PodDisruptionBudget(c, 3).Labels,
		"root credentials":    RootCredentials(c, "pw", "").Labels,
		"backup Job":          backup.Labels,
		"backup Job's pods":   backup.Spec.Template.Labels,
		"restore Job":         restore.Labels,
		"restore Job's pods":  restore.Spec.Template.Labels,
		"certificate Secrets": ClusterLabels(c),
	}
	selector := labels.SelectorFromSet(ManagedBy())
	for what, l := range made {
		if !selector.Matches(labels.Set(l)) {
			t.Errorf("%s labelled %v, without %v", what, l, ManagedBy())
		}
	}
}
