//go:build e2e

package e2e

// The helpers the e2e tests share: waiting, the objects they make and read, and the state of
// the operator's kinds. Helpers of one test stay in its file.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Waiting.

func waitFor(t testing.TB, what string, done wait.ConditionWithContextFunc) {
	t.Helper()
	if err := pollTolerant(t, what, time.Second, readyTimeout, done); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// pollTolerant asks done every interval until it says so, fails, or timeout passes. An error
// the API server may not give on the next try is not a failure but a look that found nothing:
// with several tests' clusters on two cores, the API server has answered a Get past its
// deadline (CI, 2026-11-26), which ended a wait of minutes at the first look that met it.
func pollTolerant(t testing.TB, what string, interval, timeout time.Duration, done wait.ConditionWithContextFunc) error {
	t.Helper()
	return wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := done(ctx)
		if err != nil && ctx.Err() == nil && apiServerBusy(err) {
			t.Logf("%s: %v; looking again", what, err)
			return false, nil
		}
		return ok, err
	})
}

// apiServerBusy: the API server did not answer in time, or asked to be asked later.
func apiServerBusy(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || errors.Is(err, context.DeadlineExceeded)
}

// holdsFor checks, every second for d, that nothing it must not see has happened: broken says
// what has, or "". It ends the test at the first sighting, rather than at the end of a sleep
// that only looks once: a thing done and undone within the window is caught too.
func holdsFor(t testing.TB, d time.Duration, what string, broken func(ctx context.Context) (string, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why, err := broken(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if why != "" {
			t.Fatalf("%s: %s", what, why)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}

// pollUntil polls done every 200ms until it says so or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, done func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Kubernetes objects.

func testNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix,
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = k8sClient.Delete(context.Background(), ns)
			return
		}
		// Kept for a look at what failed; its scheduled backups would go on loading the node
		// under the tests that run after.
		diagnose(t, ns.Name)
		suspendBackups(ns.Name)
	})
	return ns.Name
}

func suspendBackups(namespace string) {
	ctx := context.Background()
	backups := &etcdv1alpha1.EtcdBackupList{}
	if err := k8sClient.List(ctx, backups, client.InNamespace(namespace)); err != nil {
		return
	}
	for i := range backups.Items {
		b := &backups.Items[i]
		if b.Spec.Schedule != "" && !b.Spec.Suspend {
			patch := client.MergeFrom(b.DeepCopy())
			b.Spec.Suspend = true
			_ = k8sClient.Patch(ctx, b, patch)
		}
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func rolledOut(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation || d.Spec.Replicas == nil {
		return false
	}
	want := *d.Spec.Replicas
	if d.Status.UpdatedReplicas != want || d.Status.ReadyReplicas != want || d.Status.Replicas != want {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func conditionTrue(obj *unstructured.Unstructured, conditionType string) bool {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == conditionType {
			return m["status"] == "True"
		}
	}
	return false
}

// newClientset is a client-go clientset for what controller-runtime's client does not do, such
// as reading logs.
func newClientset(tb testing.TB) *kubernetes.Clientset {
	tb.Helper()
	cfg, err := config.GetConfig()
	if err != nil {
		tb.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return clientset
}

// podLog is the tail of a pod's only container's log, or why it could not be read.
func podLog(namespace, pod string) string {
	cfg, err := config.GetConfig()
	if err != nil {
		return err.Error()
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err.Error()
	}
	log, err := clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{TailLines: ptrTo(int64(50))}).DoRaw(context.Background())
	if err != nil {
		return err.Error()
	}
	return string(log)
}

func kubectlGet(t *testing.T, namespace, resource string) string {
	out, err := exec.Command(envOr("E2E_KUBECTL", "../../bin/k8s/kubectl"), "get", resource, "-n", namespace, "-o", "wide").CombinedOutput()
	if err != nil {
		t.Logf("kubectl get %s: %v", resource, err)
	}
	return string(out)
}

// EtcdClusters.

// patchSpec changes the spec with a merge patch, which the operator's concurrent status
// writes cannot make conflict.
func patchSpec(t testing.TB, c *etcdv1alpha1.EtcdCluster, change func(*etcdv1alpha1.EtcdCluster)) {
	t.Helper()
	before := c.DeepCopy()
	change(c)
	if err := k8sClient.Patch(context.Background(), c, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

func scaleTo(t *testing.T, c *etcdv1alpha1.EtcdCluster, size int32) {
	t.Helper()
	patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = size })
	waitAvailable(t, c, int(size))
	if pods := memberPods(t, c); len(pods) != int(size) {
		t.Fatalf("%d member pods after scaling to %d", len(pods), size)
	}
}

// waitAvailable waits until the cluster reports Available with size healthy voting members
// and status agrees with itself.
func waitAvailable(t *testing.T, c *etcdv1alpha1.EtcdCluster, size int) {
	t.Helper()
	deadline := time.Now().Add(memberTimeout)
	for {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), c)
		if err == nil && isAvailable(c, size) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster %s not Available with %d members after %v: err %v, status %+v", c.Name, size, memberTimeout, err, c.Status)
		}
		time.Sleep(time.Second)
	}
}

func isAvailable(c *etcdv1alpha1.EtcdCluster, size int) bool {
	voters := 0
	for _, m := range c.Status.Members {
		if !m.IsLearner && m.Healthy {
			voters++
		}
	}
	return meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionAvailable) &&
		c.Status.ObservedGeneration == c.Generation &&
		int(c.Status.ReadyMembers) == size && voters == size && len(c.Status.Members) == size &&
		!meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionProgressing)
}

func memberPods(t testing.TB, c *etcdv1alpha1.EtcdCluster) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// clientServiceEndpoint reaches the client Service by its cluster IP: the node routes it like
// any pod would, while the host cannot resolve cluster DNS names.
func clientServiceEndpoint(t *testing.T, c *etcdv1alpha1.EtcdCluster) string {
	t.Helper()
	svc := &corev1.Service{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: resources.ClientServiceName(c.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, resources.ClientPort)
}

// EtcdBackups and EtcdRestores.

// waitBackupPhase waits for one of the phases and returns the backup as it then was.
func waitBackupPhase(t *testing.T, b *etcdv1alpha1.EtcdBackup, timeout time.Duration, phases ...etcdv1alpha1.BackupPhase) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			t.Fatal(err)
		}
		for _, p := range phases {
			if b.Status.Phase == p {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("EtcdBackup %s: phase %q after %v, want one of %v; status %+v", b.Name, b.Status.Phase, timeout, phases, b.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitRestorePhase waits until the restore has finished, one way or the other.
func waitRestorePhase(t *testing.T, rs *etcdv1alpha1.EtcdRestore, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rs), rs); err != nil {
			t.Fatal(err)
		}
		if rs.Status.Phase == etcdv1alpha1.RestoreCompleted || rs.Status.Phase == etcdv1alpha1.RestoreFailed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("EtcdRestore %s: phase %q after %v; status %+v", rs.Name, rs.Status.Phase, timeout, rs.Status)
		}
		time.Sleep(time.Second)
	}
}

// Small things.

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func ptrTo[T any](v T) *T { return &v }

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// killProcessesOfPod sends SIGKILL to every process of the pod's containers on this machine,
// found by the pod's UID in their cgroup (the cgroupfs and the systemd drivers' spellings):
// the cut a crash makes, which no deletion through the API gives. The pod must run on the
// node the tests run on, the local cluster's only one.
func killProcessesOfPod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	killed := 0
	for _, pid := range processesOfPod(pod) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no process of pod %s/%s found on this machine to kill", pod.Namespace, pod.Name)
	}
	t.Logf("killed %d processes of pod %s/%s", killed, pod.Namespace, pod.Name)
}

// processesOfPod are the processes of pod running on this machine (the local cluster's node),
// found by the pod's UID in their cgroup: its sandbox's and its containers'.
func processesOfPod(pod *corev1.Pod) []int {
	uid := string(pod.UID)
	marks := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	var pids []int
	for _, path := range procs {
		cgroup, err := os.ReadFile(path)
		if err != nil || !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(string(cgroup), m) }) {
			continue // gone since the glob, or not the pod's
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
