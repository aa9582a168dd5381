//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// suiteLogs follows the operator's and its Jobs' logs from the suite's start (TestMain).
var suiteLogs *logCollector

// What a failed test's diagnosis shows at most: CI shows the end of a long output, and each
// failed test's last lines (hack/failed-tests.sh), so it is short and the most telling last.
const (
	diagnosisEvents       = 12
	diagnosisOperatorLog  = 15
	diagnosisMemberLog    = 3
	diagnosisLineMaxBytes = 240
)

// diagnose writes what a failed test's namespace holds when it failed, in the test's own output:
// the operator's objects' phases and conditions, every pod not ready and why, the last events
// and the last lines the operator logged about the namespace. The namespace is kept for a look
// on the machine; CI has only this.
func diagnose(t *testing.T, namespace string) {
	t.Log(diagnosis(namespace))
}

func diagnosis(namespace string) string {
	ctx := context.Background()
	var lines []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if len(line) > diagnosisLineMaxBytes {
			line = line[:diagnosisLineMaxBytes] + "…"
		}
		lines = append(lines, line)
	}
	say("=== the state of namespace %s as the test failed", namespace)
	diagnoseObjects(ctx, namespace, say)
	diagnosePods(ctx, namespace, say)
	events := &corev1.EventList{}
	if err := k8sClient.List(ctx, events, client.InNamespace(namespace)); err == nil {
		slices.SortFunc(events.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		for _, e := range events.Items[max(0, len(events.Items)-diagnosisEvents):] {
			say("event %s %s %s/%s %s ×%d: %s", eventTime(e).UTC().Format("15:04:05"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
		}
	}
	if suiteLogs != nil {
		for _, line := range suiteLogs.linesNaming(`"`+namespace+`"`, diagnosisOperatorLog) {
			say("log %s", briefLogLine(line))
		}
	}
	return strings.Join(lines, "\n")
}

// briefLogLine is a line of the operator's JSON log without what every line of a reconciler
// repeats (its controller, the object's namespace, the reconcile's ID, a stack trace): the
// time, the level, the message and the fields that say what happened.
func briefLogLine(line string) string {
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return line
	}
	ts, _ := fields["ts"].(string)
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		ts = t.UTC().Format("15:04:05")
	}
	brief := fmt.Sprintf("%s %v %v", ts, fields["level"], fields["msg"])
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch key {
		case "ts", "level", "msg", "controller", "controllerGroup", "controllerKind", "namespace", "reconcileID", "stacktrace":
			continue
		}
		if object, ok := fields[key].(map[string]any); ok && key == fields["controllerKind"] {
			brief += fmt.Sprintf(" %s/%v", key, object["name"])
			continue
		}
		if key == "name" {
			continue // the object's, said with its kind
		}
		brief += fmt.Sprintf(" %s=%v", key, fields[key])
	}
	return brief
}

// diagnoseObjects: every EtcdCluster, EtcdRestore and EtcdBackup not done, with its phase and
// the conditions that are not what a healthy object holds.
func diagnoseObjects(ctx context.Context, namespace string, say func(string, ...any)) {
	conditions := func(kind, name, phase string, conds []metav1.Condition) {
		say("%s %s: %s", kind, name, phase)
		for _, c := range conds {
			if !conditionHealthy(c) {
				say("  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	clusters := &etcdv1alpha1.EtcdClusterList{}
	if err := k8sClient.List(ctx, clusters, client.InNamespace(namespace)); err == nil {
		for _, c := range clusters.Items {
			conditions("EtcdCluster", c.Name, fmt.Sprintf("%d of %d ready, members %d", c.Status.ReadyMembers, c.Spec.Size, len(c.Status.Members)), c.Status.Conditions)
		}
	}
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := k8sClient.List(ctx, restores, client.InNamespace(namespace)); err == nil {
		for _, r := range restores.Items {
			conditions("EtcdRestore", r.Name, string(r.Status.Phase), r.Status.Conditions)
		}
	}
	backups := &etcdv1alpha1.EtcdBackupList{}
	if err := k8sClient.List(ctx, backups, client.InNamespace(namespace)); err == nil {
		for _, b := range backups.Items {
			if !slices.ContainsFunc(b.Status.Conditions, func(c metav1.Condition) bool { return !conditionHealthy(c) }) {
				continue // the usual; said by its absence
			}
			conditions("EtcdBackup", b.Name, string(b.Status.Phase), b.Status.Conditions)
		}
	}
}

// diagnosePods: every pod not ready, each container's state, and the last lines a not-ready
// container logged.
func diagnosePods(ctx context.Context, namespace string, say func(string, ...any)) {
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		say("pods: %v", err)
		return
	}
	var clientset kubernetes.Interface
	if cfg, err := config.GetConfig(); err == nil {
		clientset, _ = kubernetes.NewForConfig(cfg)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	for _, pod := range pods.Items {
		if podReady(&pod) || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		say("pod %s on %q: %s (created %s)", pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.CreationTimestamp.UTC().Format("15:04:05"))
		for _, c := range pod.Status.Conditions {
			// Ready and ContainersReady repeat what the containers' lines say.
			if c.Status != corev1.ConditionTrue && c.Message != "" && c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
				say("  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			if s.Ready || (s.State.Terminated != nil && s.State.Terminated.ExitCode == 0) {
				continue
			}
			say("  container %s: %s, restarts %d%s", s.Name, containerState(s.State), s.RestartCount, lastEnd(s))
			if clientset == nil || (s.State.Running == nil && s.State.Terminated == nil && s.LastTerminationState.Terminated == nil) {
				continue
			}
			opts := &corev1.PodLogOptions{Container: s.Name, TailLines: ptrTo(int64(diagnosisMemberLog)), Previous: s.State.Running == nil && s.State.Terminated == nil}
			log, err := clientset.CoreV1().Pods(namespace).GetLogs(pod.Name, opts).DoRaw(ctx)
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(strings.TrimSpace(string(log)), "\n") {
				say("    %s", line)
			}
		}
	}
}

// conditionHealthy: Progressing and Degraded false, every other condition true.
func conditionHealthy(c metav1.Condition) bool {
	bad := c.Type == etcdv1alpha1.ConditionProgressing || c.Type == etcdv1alpha1.ConditionDegraded
	return (c.Status == metav1.ConditionTrue) != bad
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.UTC().Format("15:04:05") + ", not ready"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s (exit %d) %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason + " " + s.Waiting.Message
	}
	return "not started"
}

func lastEnd(s corev1.ContainerStatus) string {
	if last := s.LastTerminationState.Terminated; last != nil {
		return fmt.Sprintf("; last ended %s %s (exit %d)", last.FinishedAt.UTC().Format("15:04:05"), last.Reason, last.ExitCode)
	}
	return ""
}

// TestDiagnosisSaysWhatIsWrong: what a failed test writes of its namespace names a pod that
// crashes with its exit code and its last words, its events, and an EtcdBackup's condition
// that says why it cannot run.
func TestDiagnosisSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	ns := testNamespace(t, "e2e-diagnosis-")
	create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crashes", Namespace: ns},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			SecurityContext:               restrictedPodSecurityContext(),
			Containers: []corev1.Container{{
				Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", "echo the last words; exit 3"},
				SecurityContext: restrictedContainerSecurityContext(),
			}},
		},
	})
	create(t, &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "of-nothing", Namespace: ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "absent-cluster", Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: "absent-claim"}}},
	})
	var said string
	waitFor(t, "a diagnosis naming the crash and the backup's cause", func(ctx context.Context) (bool, error) {
		said = diagnosis(ns)
		for _, want := range []string{"pod crashes", "exit 3", "the last words", "EtcdBackup of-nothing", "absent-claim", "BackOff"} {
			if !strings.Contains(said, want) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Log(said)
}

func TestBriefLogLineKeepsWhatHappened(t *testing.T) {
	line := `{"level":"info","ts":"2026-11-30T02:09:04Z","msg":"step taken","controller":"etcdcluster","controllerGroup":"etcd.database.dev","controllerKind":"EtcdCluster","EtcdCluster":{"name":"m","namespace":"e2e-matrix-1-556nj"},"namespace":"e2e-matrix-1-556nj","name":"m","reconcileID":"4604f370","cluster":"m","action":"AddLearner","members":[],"operation":"ScalingUp"}`
	want := `02:09:04 info step taken EtcdCluster/m action=AddLearner cluster=m members=[] operation=ScalingUp`
	if got := briefLogLine(line); got != want {
		t.Errorf("briefLogLine:\n got %s\nwant %s", got, want)
	}
	if got := briefLogLine("not json"); got != "not json" {
		t.Errorf("a line that is not JSON: %q", got)
	}
}
