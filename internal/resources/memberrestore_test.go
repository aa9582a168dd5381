package resources

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// A member restored in its own pod restores before etcd starts: the agent's fetch, with the
// snapshot's configuration, the S3 credentials by reference and the operator's proxy settings,
// then its own etcd image running the agent's binary around that image's etcdutl, restoring
// it as one of every member restored with it. Both are restricted; etcd gets no proxy. The
// restore is read back from the claim as it was recorded there, but for the proxy settings.
func TestARestoredMembersPodRestoresBeforeEtcdStarts(t *testing.T) {
	c := testCluster()
	members := []string{"prod-aaaaa", "prod-bbbbb", "prod-ccccc"}
	proxy := corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://proxy:3128"}
	restore := MemberRestore{Restore: "r", AgentImage: "registry/operator:v1", Members: members, Env: []corev1.EnvVar{proxy},
		Source: RestoreSource{Key: "snap.db", SHA256: "abc", RevisionBump: 7, Storage: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", CredentialsSecretName: "creds"}}}}
	spec := MemberSpec{Name: members[1], Version: "3.6.16", InitialCluster: InitialCluster(c, members), State: "new", Restore: &restore}

	pvc := MemberPVC(c, spec)
	pvc.Annotations[AnnotationMemberRestore] = MemberRestoreAnnotation(restore)
	read, err := MemberRestoreOf(pvc)
	if err != nil || read == nil || read.Env != nil || read.Source.SHA256 != "abc" || !slices.Equal(read.Members, members) || read.Source.Storage.S3.Bucket != "b" {
		t.Fatalf("read back from the claim: %+v (%v)", read, err)
	}

	pod := MemberPod(c, spec, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	if pod.Labels[LabelRestore] != "r" {
		t.Errorf("labels %v: the restore does not follow the pod", pod.Labels)
	}
	init := pod.Spec.InitContainers
	if len(init) != 2 || init[0].Name != MemberRestoreFetchContainer || init[1].Name != MemberRestoreInstallContainer {
		t.Fatalf("init containers %v", init)
	}
	fetch, install := init[0], init[1]
	if fetch.Image != "registry/operator:v1" || !slices.Equal(fetch.Args, []string{"agent", "member-restore-fetch"}) {
		t.Errorf("fetch runs %s %v", fetch.Image, fetch.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range fetch.Env {
		env[e.Name] = e
	}
	if !strings.Contains(env[jobspec.ConfigEnv].Value, `"key":"snap.db"`) || env[jobspec.AccessKeyIDEnv].ValueFrom == nil || env["HTTPS_PROXY"] != proxy {
		t.Errorf("fetch environment %v", fetch.Env)
	}
	if install.Image != "registry/etcd:v3.6.16" || !slices.Equal(install.Command, []string{jobspec.AgentBinary}) ||
		!slices.Equal(install.Args[:3], []string{"agent", "member-restore-install", "/usr/local/bin/etcdutl"}) {
		t.Errorf("install runs %s %v %v", install.Image, install.Command, install.Args)
	}
	for _, want := range []string{"--name=prod-bbbbb", "--initial-cluster=" + InitialCluster(c, members), "--initial-cluster-token=uid-1", "--bump-revision=7", "--mark-compacted"} {
		if !slices.Contains(install.Args, want) {
			t.Errorf("install's etcdutl lacks %q: %v", want, install.Args)
		}
	}
	for _, ctr := range append(init, pod.Spec.Containers...) {
		if sc := ctr.SecurityContext; sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s is not restricted: %+v", ctr.Name, sc)
		}
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "HTTPS_PROXY" {
			t.Error("etcd got the proxy settings")
		}
	}
	mounted := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		mounted[v.Name] = true
	}
	for _, ctr := range init {
		for _, m := range ctr.VolumeMounts {
			if !mounted[m.Name] {
				t.Errorf("container %s mounts %s, which the pod lacks", ctr.Name, m.Name)
			}
		}
	}

	plain := MemberPod(c, MemberSpec{Name: members[1], Version: "3.6.16", InitialCluster: spec.InitialCluster, State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	if len(plain.Spec.InitContainers) != 0 || plain.Labels[LabelRestore] != "" || plain.Annotations[AnnotationPodSpecHash] != pod.Annotations[AnnotationPodSpecHash] {
		t.Errorf("a member with no restore: init containers %v; spec hash %s, with a restore %s (a restore is no roll-out)",
			plain.Spec.InitContainers, plain.Annotations[AnnotationPodSpecHash], pod.Annotations[AnnotationPodSpecHash])
	}
}
