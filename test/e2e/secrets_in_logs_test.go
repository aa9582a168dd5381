//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The passwords the suite gives the operator in Secrets. With s3SecretKey, and any PEM private
// key, they must never be in the operator's logs: TestMain reads them once the suite has run.
const (
	tlsRootPassword        = "correct-horse"
	rotatedRootPassword    = "battery-staple"
	quorumLossRootPassword = "quorum-lost-secret-pw"
	walkFirstPassword      = "first-password"
	walkSecondPassword     = "second-password"
)

// secretsGiven are what the operator's logs must never hold, as they would be written. Tests
// that make secrets of their own (age keys) add them with giveSecret.
var secretsGiven = []string{s3SecretKey, tlsRootPassword, rotatedRootPassword, quorumLossRootPassword,
	walkFirstPassword, walkSecondPassword, matrixPassword, matrixRotatedPassword, "PRIVATE KEY"}

var secretsGivenMu sync.Mutex

// giveSecret adds secret to those the logs are searched for when the suite ends.
func giveSecret(secret string) {
	secretsGivenMu.Lock()
	defer secretsGivenMu.Unlock()
	secretsGiven = append(secretsGiven, secret)
}

// operatorPodSelectors select the pods whose logs must hold no secret: the operator's own, in any
// namespace (make deploy's, and OLM's in the namespaces of its tests), and its agent Jobs' (the
// operator's pods without a cluster label, which its members carry), which are given
// object-storage keys and TLS keys.
var operatorPodSelectors = []string{
	"app.kubernetes.io/name=etcd-operator,app.kubernetes.io/component=manager",
	"app.kubernetes.io/managed-by=etcd-operator,!etcd.database.dev/cluster",
}

// logCollector follows, from the suite's start, the log of every container of every pod
// operatorPodSelectors select, as each starts: most are gone by the suite's end (the operator's
// pods that a test's rollout replaced, Jobs' pods, namespaces deleted), and their logs with them.
type logCollector struct {
	clientset kubernetes.Interface
	cancel    context.CancelFunc
	done      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	followed  map[string]bool   // namespace/pod/container#restarts
	logs      map[string][]byte // by the same key
}

// startLogCollector looks for new containers every second until stop.
func startLogCollector(clientset kubernetes.Interface) *logCollector {
	ctx, cancel := context.WithCancel(context.Background())
	lc := &logCollector{clientset: clientset, cancel: cancel, done: make(chan struct{}), followed: map[string]bool{}, logs: map[string][]byte{}}
	go func() {
		defer close(lc.done)
		for {
			lc.followNewContainers(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return lc
}

func (lc *logCollector) followNewContainers(ctx context.Context) {
	var pods []corev1.Pod
	for _, selector := range operatorPodSelectors {
		list, err := lc.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return // a busy API server: the next look finds them
		}
		pods = append(pods, list.Items...)
	}
	for _, pod := range pods {
		for _, status := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			if status.State.Running == nil && status.State.Terminated == nil {
				continue
			}
			key := fmt.Sprintf("%s/%s/%s#%d", pod.Namespace, pod.Name, status.Name, status.RestartCount)
			lc.mu.Lock()
			seen := lc.followed[key]
			lc.followed[key] = true
			lc.mu.Unlock()
			if !seen {
				lc.wg.Add(1)
				go lc.follow(ctx, pod.Namespace, pod.Name, status.Name, key)
			}
		}
	}
}

// follow reads a container's log until it ends or the collector stops.
func (lc *logCollector) follow(ctx context.Context, namespace, pod, container, key string) {
	defer lc.wg.Done()
	stream, err := lc.clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		return // gone already; the check at the end reads what is left
	}
	defer stream.Close()
	// Kept as it is read, not when the stream ends: a failed test's diagnosis reads the
	// operator's log while the operator runs on.
	_, _ = io.Copy(collectedLog{lc, key}, stream) // what was read until the stream ended, whatever ended it
}

// collectedLog appends what is written to the log kept under key.
type collectedLog struct {
	lc  *logCollector
	key string
}

func (w collectedLog) Write(p []byte) (int, error) {
	w.lc.mu.Lock()
	defer w.lc.mu.Unlock()
	w.lc.logs[w.key] = append(w.lc.logs[w.key], p...)
	return len(p), nil
}

// linesNaming returns the last most whole lines of the followed logs that hold word, each log's
// in its order, the logs in the order of their keys.
func (lc *logCollector) linesNaming(word string, most int) []string {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var found []string
	for _, key := range slices.Sorted(maps.Keys(lc.logs)) {
		log := string(lc.logs[key])
		if i := strings.LastIndexByte(log, '\n'); i >= 0 {
			log = log[:i] // the last line may be half written
		}
		for line := range strings.SplitSeq(log, "\n") {
			if strings.Contains(line, word) {
				found = append(found, line)
			}
		}
	}
	return found[max(0, len(found)-most):]
}

// stop ends every follow and returns the logs read, by container.
func (lc *logCollector) stop() map[string][]byte {
	lc.cancel()
	<-lc.done
	lc.wg.Wait()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return maps.Clone(lc.logs)
}

// operatorLogsHoldNoSecret reads the logs the collector followed through the suite, and the logs
// of every container of every pod in the operator's namespace now, the previous instance's too
// (a crash, a failpoint), and says which of secretsGiven they hold. Reading nothing is a failure:
// it would pass whatever was logged. The kubelet keeps the last 10 MiB of a container's log; an
// e2e run's operator log is a few MiB.
func operatorLogsHoldNoSecret(clientset kubernetes.Interface, followed map[string][]byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := clientset.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var read, containers int
	var found []string
	for _, key := range slices.Sorted(maps.Keys(followed)) {
		read += len(followed[key])
		for _, secret := range secretsGiven {
			if strings.Contains(string(followed[key]), secret) {
				found = append(found, fmt.Sprintf("%q in the log of %s, followed while it ran", secret, key))
			}
		}
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			// Being stopped (a test killed the operator): its log, followed while it ran, is
			// above, and the kubelet may no longer serve it.
			continue
		}
		for _, container := range pod.Spec.Containers {
			for _, previous := range []bool{false, true} {
				log, err := readLog(ctx, clientset, pod.Name, &corev1.PodLogOptions{Container: container.Name, Previous: previous})
				if apierrors.IsNotFound(err) && !previous {
					break // the pod went since the list: its log was followed
				}
				if err != nil {
					if previous {
						continue // no earlier instance
					}
					return "", fmt.Errorf("the log of %s/%s: %w", pod.Name, container.Name, err)
				}
				read += len(log)
				containers++
				for _, secret := range secretsGiven {
					if strings.Contains(string(log), secret) {
						found = append(found, fmt.Sprintf("%q in the log of %s/%s (previous: %t)", secret, pod.Name, container.Name, previous))
					}
				}
			}
		}
	}
	switch {
	case read == 0:
		return "", fmt.Errorf("no log read in namespace %s: nothing was checked", operatorNamespace)
	case len(found) > 0:
		return "", fmt.Errorf("a secret given to the operator is in its logs: %s", strings.Join(found, "; "))
	}
	return fmt.Sprintf("%d bytes of %d container logs followed while they ran (the operator's and its Jobs', in every namespace) and of %d in %s at the end hold none of the %d secrets given",
		read, len(followed), containers, operatorNamespace, len(secretsGiven)), nil
}

// readLog reads a container's log, asking again twice on an error of the API server or the
// kubelet that serves it (a kubelet busy after a suite's faults answered one "the server
// rejected our request for an unknown reason"); a log that does not exist is not asked again.
func readLog(ctx context.Context, clientset kubernetes.Interface, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
	var err error
	for attempt := range 3 {
		var log []byte
		log, err = clientset.CoreV1().Pods(operatorNamespace).GetLogs(pod, opts).DoRaw(ctx)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) {
			return log, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt+1) * 2 * time.Second):
		}
	}
	return nil, err
}

// The check reads the logs of pods that are gone by the suite's end: a pod labelled as the
// operator's agents are prints a string and is deleted, and the collector has its log.
func TestTheLogCheckReadsPodsThatAreGone(t *testing.T) {
	inParallel(t, 5*time.Second)
	collector := startLogCollector(newClientset(t))
	ns := testNamespace(t, "e2e-logs-")
	planted := fmt.Sprintf("planted-%d", time.Now().UnixNano())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-like", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "etcd-operator"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptrTo(false), SecurityContext: restrictedPodSecurityContext(),
			Containers: []corev1.Container{{Name: "print", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"echo", planted}, SecurityContext: restrictedContainerSecurityContext()}},
		},
	}
	create(t, pod)
	waitFor(t, "pod "+pod.Name+" ended", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, err
	})
	time.Sleep(2 * time.Second) // the collector looks every second
	if err := k8sClient.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+pod.Name+" gone", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)), nil
	})
	logs := collector.stop()
	if got := logs[ns+"/agent-like/print#0"]; !strings.Contains(string(got), planted) {
		t.Fatalf("the collector read %q of the deleted pod's log (%d logs in all), want %s in it", got, len(logs), planted)
	}
}
