package resources

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Every version gets etcd's corruption checks in the spelling it takes: 3.7 refuses the
// --experimental-* flags 3.5 needs, and a 3.5 before 3.5.5 has no compaction hash check.
func TestCorruptionChecksAreOnInTheVersionsSpelling(t *testing.T) {
	gates := "--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true"
	for version, want := range map[string][]string{
		"3.7.3":  {gates},
		"3.6.16": {gates},
		"3.6.0":  {gates},
		"3.5.21": {"--experimental-initial-corrupt-check=true", "--experimental-compact-hash-check-enabled=true"},
		"3.5.5":  {"--experimental-initial-corrupt-check=true", "--experimental-compact-hash-check-enabled=true"},
		"3.5.4":  {"--experimental-initial-corrupt-check=true"},
		"3.10.0": {gates},
		"4.0.0":  {gates},
	} {
		c := testCluster()
		pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: version, State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
		args := pod.Spec.Containers[0].Args
		for _, w := range want {
			if !slices.Contains(args, w) {
				t.Errorf("%s: args lack %q: %v", version, w, args)
			}
		}
		if got := CorruptionCheckArgs(version); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", version, got, want)
		}
		c.Spec.CorruptionCheck.Policy = etcdv1alpha1.CorruptionCheckDisabled
		off := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: version, State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
		for _, w := range want {
			if slices.Contains(off.Spec.Containers[0].Args, w) {
				t.Errorf("%s with policy Disabled: args have %q", version, w)
			}
		}
	}
	pod := MemberPod(testCluster(), MemberSpec{Name: "prod-aaaaa", Version: "3.6.16", State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	if p := pod.Spec.Containers[0].TerminationMessagePolicy; p != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("etcd's termination message policy is %q: a failed start-up check would not reach the pod's status", p)
	}
}

// Pods made before the checks existed record the same spec hash as a cluster with them on (the
// default), so an operator upgrade restarts no member; turning them off restarts each.
func TestOnlyTurningTheChecksOffChangesThePodSpecHash(t *testing.T) {
	c := testCluster()
	before := MemberPodSpecHash(c)
	c.Spec.CorruptionCheck.Policy = etcdv1alpha1.CorruptionCheckEnabled
	if h := MemberPodSpecHash(c); h != before {
		t.Errorf("policy Enabled changed the hash from %s to %s: every member would restart on an operator upgrade", before, h)
	}
	// What the operator before the checks recorded on this cluster's pods.
	if before != "1102dca90b27256b" {
		t.Errorf("the test cluster's hash is %s, not the one pods made before the checks record: every member would restart on an operator upgrade", before)
	}
	c.Spec.CorruptionCheck.Policy = etcdv1alpha1.CorruptionCheckDisabled
	if h := MemberPodSpecHash(c); h == before {
		t.Error("policy Disabled left the hash as it was: members would keep running with the checks")
	}
}
