package resources

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
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
	c.UID = "cluster-uid"
	c.Status.CorruptMembers = []etcdv1alpha1.CorruptMember{{Name: "prod-bad", ID: "1f"}, {Name: "prod-never-listed"}}
	b := testBackup(etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
		Bucket: "snaps", Prefix: "p/", Endpoint: "https://s3.example", CredentialsSecretName: "s3-creds", CASecretName: "s3-ca",
	}})
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	job, err := BackupJob(b, c, "registry/etcd-operator:v1", at, PodSettings{Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "nightly-20261122t030000" || job.Namespace != "db" || job.Labels[LabelBackup] != "nightly" {
		t.Errorf("job %s/%s labels %v", job.Namespace, job.Name, job.Labels)
	}
	if uid := job.Annotations[AnnotationClusterUID]; uid != "cluster-uid" {
		t.Errorf("the Job names cluster UID %q, want the cluster's, recorded with its snapshot", uid)
	}
	pod := job.Spec.Template.Spec
	ctr := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	for _, name := range []string{jobspec.AccessKeyIDEnv, jobspec.SecretAccessKeyEnv, jobspec.SessionTokenEnv} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "s3-creds" {
			t.Errorf("%s must come from Secret s3-creds, not a value: %+v", name, e)
		}
	}
	if env["HTTPS_PROXY"].Value != "http://proxy" {
		t.Errorf("proxy settings not passed on: %v", ctr.Env)
	}
	var cfg jobspec.JobConfig
	if err := json.Unmarshal([]byte(env[jobspec.ConfigEnv].Value), &cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.TLS || cfg.Cluster != "prod" || cfg.MaxCount != 3 || cfg.MaxAge != time.Hour ||
		len(cfg.Endpoints) != 1 || !strings.HasPrefix(cfg.Endpoints[0], "https://prod-client.db.svc") || cfg.Storage.S3.Bucket != "snaps" {
		t.Errorf("agent configuration %+v", cfg)
	}
	if !slices.Equal(cfg.SkipMembers, []string{"1f"}) {
		t.Errorf("the members found corrupt are not passed on as never a source: %v", cfg.SkipMembers)
	}
	// The agent names the snapshots after the EtcdBackup, and prunes only those.
	if cfg.Namespace != "db" || cfg.Backup != "nightly" || cfg.BackupUID != "3f9a1c20-7b4e-4d6a-9e15-c2b8d0f4a761" {
		t.Errorf("agent configuration %+v: want the EtcdBackup's namespace, name and UID", cfg)
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if mounts[jobspec.EtcdTLSDir] == "" || mounts[jobspec.StorageCADir] == "" {
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
	job, err := BackupJob(b, testCluster(), "img", time.Now(), PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgentJob(t, job)
	pod := job.Spec.Template.Spec
	if pod.Volumes[0].PersistentVolumeClaim.ClaimName != "backups" || pod.Containers[0].VolumeMounts[0].MountPath != jobspec.ClaimDir {
		t.Errorf("claim not mounted at %s: %+v", jobspec.ClaimDir, pod.Volumes)
	}
}

// checkAgentJob checks what every agent Job must be: restricted, without API access, failed at
// once by a permanent error, reporting through its termination message.
func checkAgentJob(t *testing.T, job *batchv1.Job) {
	t.Helper()
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
	if len(rules) != 1 || rules[0].Action != "FailJob" || rules[0].OnExitCodes.Values[0] != jobspec.ExitPermanent {
		t.Errorf("a permanent failure must fail the Job at once: %+v", rules)
	}
	if pod.Containers[0].TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("the report is the termination message file")
	}
}

// The preserve-data Job reads the survivor's claim where the member's pod mounts it, so the agent
// finds etcd's data directory there, and cannot write to it: the data it keeps a copy of is the
// data it must not harm. It writes only to the quorum-recovery claim.
func TestPreserveDataJobReadsTheMemberClaimAndWritesTheRecoveryClaim(t *testing.T) {
	c := testCluster()
	job, err := PreserveDataJob(c, "prod-abcde", "registry/etcd-operator:v1", PodSettings{Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "prod-abcde-preserve" || job.Name != PreserveDataJobName("prod-abcde") || job.Namespace != "db" ||
		job.Labels[LabelCluster] != "prod" || job.Labels[LabelQuorumRecovery] != "prod" {
		t.Errorf("job %s/%s labels %v", job.Namespace, job.Name, job.Labels)
	}
	if l := job.Spec.Template.Labels; l[LabelQuorumRecovery] != "prod" || l[LabelCluster] != "" {
		t.Errorf("pod labels %v: want %s, never %s", l, LabelQuorumRecovery, LabelCluster)
	}
	checkAgentJob(t, job)
	pod := job.Spec.Template.Spec
	ctr := pod.Containers[0]
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 || ctr.Name != PreserveDataContainer ||
		ctr.Image != "registry/etcd-operator:v1" || !slices.Equal(ctr.Args, []string{"agent", "preserve-data"}) {
		t.Errorf("containers %+v", pod.Containers)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	var cfg jobspec.JobConfig
	if err := json.Unmarshal([]byte(env[jobspec.ConfigEnv]), &cfg); err != nil || cfg.Cluster != "prod" || cfg.Member != "prod-abcde" {
		t.Errorf("agent configuration %+v, %v", cfg, err)
	}
	if env["HTTPS_PROXY"] != "http://proxy" {
		t.Errorf("proxy settings not passed on: %v", ctr.Env)
	}

	claims := map[string]*corev1.PersistentVolumeClaimVolumeSource{}
	for _, v := range pod.Volumes {
		claims[v.Name] = v.PersistentVolumeClaim
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m
	}
	member, recovery := mounts[jobspec.MemberDataMount], mounts[jobspec.ClaimDir]
	if claim := claims[member.Name]; claim == nil || claim.ClaimName != PVCName("prod-abcde") || !claim.ReadOnly || !member.ReadOnly {
		t.Errorf("the member's claim must be mounted read-only at %s: mount %+v, volume %+v", jobspec.MemberDataMount, member, claim)
	}
	if claim := claims[recovery.Name]; claim == nil || claim.ClaimName != QuorumRecoveryClaimName("prod") || claim.ReadOnly || recovery.ReadOnly {
		t.Errorf("the recovery claim must be mounted writable at %s: mount %+v, volume %+v", jobspec.ClaimDir, recovery, claim)
	}
	if len(pod.Volumes) != 2 || len(ctr.VolumeMounts) != 2 {
		t.Errorf("volumes %+v mounted %+v: want the two claims only", pod.Volumes, ctr.VolumeMounts)
	}
	// The agent reads agent.MemberDataDir: the data directory etcd runs with, on that claim.
	etcdPod := MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{}).Spec
	etcdMount := etcdPod.Containers[0].VolumeMounts[0]
	if etcdPod.Volumes[0].PersistentVolumeClaim.ClaimName != PVCName("prod-abcde") || etcdMount.MountPath != jobspec.MemberDataMount ||
		!slices.Contains(etcdPod.Containers[0].Args, "--data-dir="+jobspec.MemberDataDir) {
		t.Errorf("etcd runs from %v at %s (%v), not where the agent reads", etcdPod.Volumes[0], etcdMount.MountPath, etcdPod.Containers[0].Args)
	}

	c.Spec.Storage.Ephemeral = true
	if job, err := PreserveDataJob(c, "prod-abcde", "img", PodSettings{}); err == nil {
		t.Errorf("a cluster on emptyDir volumes has no member claim to copy, yet got Job %+v", job.Spec.Template.Spec.Volumes)
	}
}

// The read-log Job reads the member's claim read-only, writes nothing anywhere, runs beside the
// member's pod on its node, and says which quorum loss it reads for.
func TestReadLogJobOnlyReadsTheMemberClaimOnItsNode(t *testing.T) {
	c := testCluster()
	lostAt := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	job, err := ReadLogJob(c, "prod-abcde", "node-1", lostAt, "registry/etcd-operator:v1", PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != ReadLogJobName("prod-abcde") || job.Labels[LabelQuorumRecovery] != "prod" || job.Spec.Template.Labels[LabelCluster] != "" ||
		job.Annotations[AnnotationQuorumLostAt] != "2026-11-25T04:00:00Z" {
		t.Errorf("job %s labels %v annotations %v", job.Name, job.Labels, job.Annotations)
	}
	checkAgentJob(t, job)
	pod := job.Spec.Template.Spec
	ctr := pod.Containers[0]
	if len(pod.Containers) != 1 || ctr.Name != ReadLogContainer || !slices.Equal(ctr.Args, []string{"agent", "read-log"}) {
		t.Errorf("containers %+v", pod.Containers)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != PVCName("prod-abcde") ||
		!pod.Volumes[0].PersistentVolumeClaim.ReadOnly || len(ctr.VolumeMounts) != 1 || !ctr.VolumeMounts[0].ReadOnly ||
		ctr.VolumeMounts[0].MountPath != jobspec.MemberDataMount {
		t.Errorf("volumes %+v mounted %+v: want the member's claim only, read-only at %s", pod.Volumes, ctr.VolumeMounts, jobspec.MemberDataMount)
	}
	terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Key != "metadata.name" ||
		!slices.Equal(terms[0].MatchFields[0].Values, []string{"node-1"}) {
		t.Errorf("node affinity %+v: want the member pod's node", terms)
	}
	if job, _ := ReadLogJob(c, "prod-abcde", "", lostAt, "img", PodSettings{}); len(job.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields) != 0 {
		t.Errorf("with no member pod on a node, the Job goes where the claim allows: affinity %+v", job.Spec.Template.Spec.Affinity)
	}
	c.Spec.Storage.Ephemeral = true
	if _, err := ReadLogJob(c, "prod-abcde", "", lostAt, "img", PodSettings{}); err == nil {
		t.Error("a cluster on emptyDir volumes has no member claim to read")
	}
}

// The recovery claim fits the survivor's data (as large as a member's claim), is kept or deleted
// with the cluster as the members' claims are, and is never taken for a member's.
func TestQuorumRecoveryClaimIsSizedAndKeptLikeAMemberClaimButIsNone(t *testing.T) {
	c := testCluster()
	size, class := resource.MustParse("10Gi"), "fast"
	c.Spec.Storage.Size, c.Spec.Storage.StorageClassName = &size, &class
	pvc := QuorumRecoveryClaim(c)
	if pvc.Name != "prod-quorum-recovery" || pvc.Name != QuorumRecoveryClaimName("prod") || pvc.Namespace != "db" {
		t.Errorf("claim %s/%s", pvc.Namespace, pvc.Name)
	}
	wantLabels := map[string]string{LabelCluster: "prod", LabelManagedBy: "etcd-operator", LabelName: "etcd-operator-quorum-recovery"}
	if !maps.Equal(pvc.Labels, wantLabels) {
		t.Errorf("labels %v, want %v (and never %s)", pvc.Labels, wantLabels, LabelMember)
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" ||
		!pvc.Spec.Resources.Requests.Storage().Equal(size) {
		t.Errorf("spec %+v", pvc.Spec)
	}
	member := MemberPVC(c, MemberSpec{Name: "prod-abcde"})
	for _, policy := range []etcdv1alpha1.PVCRetentionPolicyType{etcdv1alpha1.RetainPVC, etcdv1alpha1.DeletePVC} {
		c.Spec.Storage.RetentionPolicy.WhenDeleted = policy
		got, want := QuorumRecoveryClaim(c).OwnerReferences, MemberPVC(c, MemberSpec{Name: "prod-abcde"}).OwnerReferences
		if !reflect.DeepEqual(got, want) || (len(got) == 1) != (policy == etcdv1alpha1.DeletePVC) {
			t.Errorf("whenDeleted %s: owners %+v, a member claim's %+v", policy, got, want)
		}
	}
	if !pvc.Spec.Resources.Requests.Storage().Equal(*member.Spec.Resources.Requests.Storage()) {
		t.Errorf("recovery claim %v, member claim %v", pvc.Spec.Resources.Requests, member.Spec.Resources.Requests)
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
// And only voters count in the budget: a learner's pod, which the Services select, it does not.
func TestAgentPodsAreNotSelectedAsMembers(t *testing.T) {
	c := testCluster()
	jobs := agentJobsOf(t, c, PodSettings{})
	pdb, err := metav1.LabelSelectorAsSelector(PodDisruptionBudget(c, 3).Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	selectors := map[string]labels.Selector{
		"client Service": labels.SelectorFromSet(ClientService(c).Spec.Selector),
		"peer Service":   labels.SelectorFromSet(PeerService(c).Spec.Selector),
		"budget":         pdb,
	}
	member := MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16", Voter: true}, EtcdImages{Repository: "etcd"}, PodSettings{})
	learner := MemberPod(c, MemberSpec{Name: "prod-fghjk", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{})
	for what, sel := range selectors {
		if !sel.Matches(labels.Set(member.Labels)) {
			t.Errorf("the %s does not select member pod labels %v", what, member.Labels)
		}
		if selects := sel.Matches(labels.Set(learner.Labels)); selects != (what != "budget") {
			t.Errorf("the %s selects a learner's pod (labels %v): %t", what, learner.Labels, selects)
		}
		for name, job := range jobs {
			if tmpl := job.Spec.Template.Labels; sel.Matches(labels.Set(tmpl)) {
				t.Errorf("the %s selects the %s Job's pods (labels %v)", what, name, tmpl)
			}
		}
	}
	for name, job := range jobs {
		if job.Labels[LabelCluster] != "prod" {
			t.Errorf("the %s Job itself still says which cluster it serves: %v", name, job.Labels)
		}
	}
}

// The manager caches, of these kinds, only objects with the ManagedBy label: whatever a
// builder makes without it the operator would create and then never see again. A pod
// template's own labels cannot take it away.
func TestEveryObjectMadeCarriesTheManagedByLabel(t *testing.T) {
	c := testCluster()
	c.Spec.PodTemplate.Metadata.Labels = map[string]string{LabelManagedBy: "someone-else"}
	backup, err := BackupJob(testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}), c, "img", time.Now(), PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, c, RestoreMember{Name: "prod-seed", Members: []string{"prod-seed"}},
		RestoreSource{Storage: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}}, "img", EtcdImages{Repository: "etcd"}, PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	preserve, err := PreserveDataJob(c, "prod-abcde", "img", PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	record, err := RootCredentials(c, RootRecord{Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	member := MemberSpec{Name: "prod-abcde", Version: "3.6.16"}
	made := map[string]map[string]string{
		"member pod":          MemberPod(c, member, EtcdImages{Repository: "etcd"}, PodSettings{}).Labels,
		"member claim":        MemberPVC(c, member).Labels,
		"peer Service":        PeerService(c).Labels,
		"client Service":      ClientService(c).Labels,
		"disruption budget":   PodDisruptionBudget(c, 3).Labels,
		"root credentials":    record.Labels,
		"backup Job":          backup.Labels,
		"backup Job's pods":   backup.Spec.Template.Labels,
		"restore Job":         restore.Labels,
		"restore Job's pods":  restore.Spec.Template.Labels,
		"preserve-data Job":   preserve.Labels,
		"its pods":            preserve.Spec.Template.Labels,
		"recovery claim":      QuorumRecoveryClaim(c).Labels,
		"certificate Secrets": ClusterLabels(c),
	}
	selector := labels.SelectorFromSet(ManagedBy())
	for what, l := range made {
		if !selector.Matches(labels.Set(l)) {
			t.Errorf("%s labelled %v, without %v", what, l, ManagedBy())
		}
	}
}

// A restore Job's etcdutl bumps the revision, marking what it skips compacted, exactly when a
// bump is asked for, and the Job says which bump it applies; its fetch is told the bump and
// where the series' watermarks are, to check the one against the other.
func TestRestoreJobBumpsTheRevision(t *testing.T) {
	for _, bump := range []int64{0, 1_200_000} {
		job, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, testCluster(), RestoreMember{Name: "prod-seed", Members: []string{"prod-seed"}},
			RestoreSource{Storage: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}, RevisionBump: bump, WatermarkDir: "db/prod/b_1/"}, "img", EtcdImages{Repository: "etcd"}, PodSettings{})
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		var fetch jobspec.JobConfig
		for _, c := range job.Spec.Template.Spec.InitContainers {
			if c.Name == RestoreEtcdutlContainer {
				args = c.Args
			}
			for _, e := range c.Env {
				if c.Name == RestoreFetchContainer && e.Name == jobspec.ConfigEnv {
					if err := json.Unmarshal([]byte(e.Value), &fetch); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if fetch.RevisionBump != bump || fetch.WatermarkDir != "db/prod/b_1/" {
			t.Errorf("bump %d: the fetch is told bump %d and watermarks in %q", bump, fetch.RevisionBump, fetch.WatermarkDir)
		}
		bumped, compacted := slices.Contains(args, "--bump-revision=1200000"), slices.Contains(args, "--mark-compacted")
		if bumped != (bump > 0) || compacted != (bump > 0) {
			t.Errorf("bump %d: etcdutl args %v", bump, args)
		}
		if got := job.Annotations[AnnotationRevisionBump]; got != strconv.FormatInt(bump, 10) {
			t.Errorf("bump %d: the Job's annotation says %q", bump, got)
		}
	}
}

// A bucket reached with the pod's own AWS identity: the Jobs that read and write it run as the
// ServiceAccount bound to the IAM role, with no keys from a Secret and still no Kubernetes API
// token of their own.
func TestStorageJobsRunAsTheBucketsServiceAccount(t *testing.T) {
	loc := etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "snaps", ServiceAccountName: "etcd-backups"}}
	backup, err := BackupJob(testBackup(loc), testCluster(), "registry/etcd-operator:v1", time.Now(), PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, testCluster(), RestoreMember{Name: "prod-seed", Members: []string{"prod-seed"}},
		RestoreSource{Storage: loc, Key: "k"}, "registry/etcd-operator:v1", EtcdImages{}, PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	verify, err := VerifyJob(testBackup(loc), testCluster(), VerifySnapshot{Storage: loc, Key: "k", Run: "nightly-20261122t030000"},
		"registry/etcd-operator:v1", EtcdImages{}, PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	for name, job := range map[string]*batchv1.Job{"backup": backup, "restore": restore, "verify": verify} {
		pod := job.Spec.Template.Spec
		if pod.ServiceAccountName != "etcd-backups" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s Job runs as %q, API token mounted %v", name, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
		}
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					t.Errorf("%s Job's %s takes %s from Secret %s, with no credentials Secret named", name, c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
	}
}

// The verify Job restores the snapshot in its own pod with the cluster's etcd version, always
// checking the snapshot's hash, serves it on the pod's loopback as a native sidecar, and never
// writes to the destination; every container is restricted.
func TestVerifyJobRestoresInItsOwnPodAndOnlyReadsTheDestination(t *testing.T) {
	c := testCluster()
	b := testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}})
	snap := VerifySnapshot{
		Storage: b.Spec.Destination, Key: "db/prod/x.db", Run: "nightly-20261122t030000",
		Artifact: etcdv1alpha1.BackupArtifact{URI: "pvc://backups/db/prod/x.db", SHA256: "abc", Revision: 42,
			Keyspace: &etcdv1alpha1.SnapshotKeyspace{Revision: 42, HashKV: 7, CompactRevision: 3, KeyCount: 9}},
	}
	job, err := VerifyJob(b, c, snap, "registry/etcd-operator:v1", EtcdImages{Repository: "etcd"}, PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgentJob(t, job)
	if job.Name != "nightly-20261122t030000-verify" || job.Labels[LabelBackup] != "nightly" || job.Labels[LabelVerify] != snap.Run ||
		job.Annotations[AnnotationSnapshotURI] != snap.Artifact.URI {
		t.Errorf("job %s labels %v annotations %v", job.Name, job.Labels, job.Annotations)
	}
	pod := job.Spec.Template.Spec
	var names []string
	for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		names = append(names, ctr.Name)
		sc := ctr.SecurityContext
		if sc == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s is not restricted: %+v", ctr.Name, sc)
		}
		for _, m := range ctr.VolumeMounts {
			if m.Name == "claim" && !m.ReadOnly {
				t.Errorf("container %s may write to the destination", ctr.Name)
			}
		}
		if slices.Contains(ctr.Args, "--skip-hash-check") {
			t.Errorf("container %s skips the snapshot's hash check: %v", ctr.Name, ctr.Args)
		}
	}
	if want := []string{VerifyFetchContainer, VerifyEtcdutlContainer, VerifyEtcdContainer, VerifyContainer}; !slices.Equal(names, want) {
		t.Errorf("containers %v, want %v", names, want)
	}
	if p := pod.InitContainers[2].RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the restored member must be a native sidecar, stopped once the check ends: %v", p)
	}
	if img := pod.InitContainers[1].Image; img != pod.InitContainers[2].Image || !strings.Contains(img, c.Spec.Version) {
		t.Errorf("etcdutl %s and etcd %s must be the cluster's version %s", img, pod.InitContainers[2].Image, c.Spec.Version)
	}
	var cfg jobspec.JobConfig
	if err := json.Unmarshal([]byte(pod.Containers[0].Env[0].Value), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Key != snap.Key || cfg.SHA256 != "abc" || cfg.Revision != 42 || cfg.Keyspace == nil || *cfg.Keyspace != *snap.Artifact.Keyspace ||
		!slices.Equal(cfg.Endpoints, []string{jobspec.VerifyClientURL}) {
		t.Errorf("verify configuration %+v", cfg)
	}
	// The restored member serves over TLS and takes a client certificate's name as the user:
	// a snapshot of a cluster with authentication is verified as root.
	member, verifier := pod.InitContainers[2], pod.Containers[0]
	for _, arg := range slices.Concat([]string{"--listen-client-urls=" + jobspec.VerifyClientURL}, jobspec.VerifyEtcdTLSArgs(jobspec.VerifyTLSDir)) {
		if !slices.Contains(member.Args, arg) {
			t.Errorf("the restored member's args %v lack %s", member.Args, arg)
		}
	}
	if !strings.HasPrefix(jobspec.VerifyClientURL, "https://") || !slices.Contains(member.Args, "--client-cert-auth") {
		t.Errorf("the restored member serves %s, args %v: want TLS with client certificates", jobspec.VerifyClientURL, member.Args)
	}
	if len(verifier.VolumeMounts) != 1 || verifier.VolumeMounts[0].MountPath != jobspec.VerifyScratchDir || !verifier.VolumeMounts[0].ReadOnly {
		t.Errorf("the verifier mounts %+v: want the scratch directory, read-only, for its client certificate", verifier.VolumeMounts)
	}
	// A namespace whose ResourceQuota demands limits admits the pod: every container has one.
	for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if _, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("container %s has no memory limit: a ResourceQuota on limits.memory refuses the pod", ctr.Name)
		}
	}
	if got, want := member.Resources.Limits[corev1.ResourceMemory], memberResources(c).Limits[corev1.ResourceMemory]; got.Cmp(want) != 0 {
		t.Errorf("the restored member's memory limit %s, want a member's, %s", got.String(), want.String())
	}
}

// agentJobsOf builds, for cluster c, one Job of each kind the operator starts whose pods are not
// pinned to a node: backup, verify, restore, preserve-data, read-log and point-in-time, with
// pods.
func agentJobsOf(t *testing.T, c *etcdv1alpha1.EtcdCluster, pods PodSettings) map[string]*batchv1.Job {
	t.Helper()
	claim := etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}
	backup, err := BackupJob(testBackup(claim), c, "img", time.Now(), pods)
	if err != nil {
		t.Fatal(err)
	}
	verify, err := VerifyJob(testBackup(claim), c, VerifySnapshot{Storage: claim, Key: "x.db", Run: "nightly-20261122t030000",
		Artifact: etcdv1alpha1.BackupArtifact{URI: "pvc://b/x.db"}}, "img", EtcdImages{Repository: "etcd"}, pods)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreJob(&etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "db"}}, c, RestoreMember{Name: "prod-seed", Members: []string{"prod-seed"}},
		RestoreSource{Storage: claim}, "img", EtcdImages{Repository: "etcd"}, pods)
	if err != nil {
		t.Fatal(err)
	}
	preserve, err := PreserveDataJob(c, "prod-abcde", "img", pods)
	if err != nil {
		t.Fatal(err)
	}
	readLog, err := ReadLogJob(c, "prod-abcde", "", time.Now(), "img", pods)
	if err != nil {
		t.Fatal(err)
	}
	pitr, err := PointInTimeJob(testBackup(claim), c, PointInTime{Restore: "r", RestoreUID: "r-uid", Revision: 42}, "img", EtcdImages{Repository: "etcd"}, pods)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*batchv1.Job{"backup": backup, "verify": verify, "restore": restore, "preserve-data": preserve, "read-log": readLog, "point-in-time": pitr}
}

// On a platform that assigns pod IDs (OpenShift's restricted-v2), every pod the operator makes
// leaves its user, group and filesystem group to the platform, which refuses others; elsewhere
// each runs as the non-root user its image is built for, owning the volumes it writes. Both stay
// restricted.
func TestPodsLeaveTheirIDsToAPlatformThatAssignsThem(t *testing.T) {
	c := testCluster()
	for _, pods := range []PodSettings{{}, {PlatformAssignsIDs: true}} {
		specs := map[string]corev1.PodSpec{
			"member": MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, pods).Spec,
		}
		for kind, job := range agentJobsOf(t, c, pods) {
			specs[kind] = job.Spec.Template.Spec
		}
		for kind, spec := range specs {
			sc := spec.SecurityContext
			ids := []*int64{sc.RunAsUser, sc.RunAsGroup, sc.FSGroup}
			for _, ctr := range spec.Containers {
				ids = append(ids, ctr.SecurityContext.RunAsUser, ctr.SecurityContext.RunAsGroup)
			}
			for _, ctr := range spec.InitContainers {
				ids = append(ids, ctr.SecurityContext.RunAsUser, ctr.SecurityContext.RunAsGroup)
			}
			if pods.PlatformAssignsIDs {
				if slices.ContainsFunc(ids, func(id *int64) bool { return id != nil }) {
					t.Errorf("%s pod on a platform that assigns IDs sets some: pod %+v", kind, sc)
				}
			} else if *sc.RunAsUser != 65532 || *sc.RunAsGroup != 65532 || *sc.FSGroup != 65532 {
				t.Errorf("%s pod runs as %d:%d with filesystem group %d, want 65532 for all", kind, *sc.RunAsUser, *sc.RunAsGroup, *sc.FSGroup)
			}
			if !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s pod with %+v is not restricted: %+v", kind, pods, sc)
			}
		}
	}
}

// Every container that runs the agent is told its own memory limit by the downward API, so the
// agent keeps its heap under it (agent.LimitMemory), whatever limit its builder gave it: the
// Jobs', the archiver's (sized by its segments) and a restored member's init containers (the
// member's own).
func TestEveryAgentIsToldItsOwnMemoryLimit(t *testing.T) {
	c := testCluster()
	specs := map[string]corev1.PodSpec{}
	for kind, job := range agentJobsOf(t, c, PodSettings{}) {
		specs[kind] = job.Spec.Template.Spec
	}
	archiver, err := ArchiverDeployment(testBackup(etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}), c, "img", time.Minute, 16<<20, "", PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	specs["archiver"] = archiver.Spec.Template.Spec
	restore := MemberRestore{Restore: "r", AgentImage: "img", Members: []string{"prod-abcde"},
		Source: RestoreSource{Key: "snap.db", Storage: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}}}
	specs["restored member"] = MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16", State: "new", Restore: &restore}, EtcdImages{Repository: "etcd"}, PodSettings{}).Spec
	agents := 0
	for kind, spec := range specs {
		for _, ctr := range slices.Concat(spec.InitContainers, spec.Containers) {
			// A name given twice: the API server keeps the last and warns that apply may drop it.
			seen := map[string]bool{}
			for _, e := range ctr.Env {
				if seen[e.Name] {
					t.Errorf("the %s's container %s has %s twice", kind, ctr.Name, e.Name)
				}
				seen[e.Name] = true
			}
			if len(ctr.Args) == 0 || ctr.Args[0] != "agent" {
				continue
			}
			agents++
			told := slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
				return e.Name == jobspec.MemoryLimitEnv && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
					e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == ""
			})
			if !told {
				t.Errorf("the %s's container %s is not told its own memory limit: %+v", kind, ctr.Name, ctr.Env)
			}
		}
	}
	if agents < len(specs) {
		t.Errorf("%d agent containers in %d pod specs: some builder's agent was not found", agents, len(specs))
	}
}
