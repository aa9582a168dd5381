//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/etcd-database/etcd-operator/test/failpoints"
)

const (
	// gofailPort is where the failpoint build serves gofail's HTTP endpoint (GOFAIL_HTTP).
	gofailPort = 22381
	// leaseName is the operator's leader-election Lease (main.go), in its namespace.
	leaseName = "etcd-operator.etcd.database.dev"
	// walkHolder is who holds the Lease while the walk arms a restarted operator.
	walkHolder = "failpoint-walk"
	// restartTimeout bounds one restart: old pod gone, new one running and armed.
	restartTimeout = 2 * time.Minute
)

// failpointPanic is how gofail reports a panic term `panic("<name>")` the walk armed.
var failpointPanic = regexp.MustCompile(`failpoint panic: (\w+)`)

// failpointOperator is the operator's failpoint build, run by its Deployment, and the walk's
// hold on it. It arms the failpoints of the operation under way through gofail's HTTP endpoint
// (each as a panic that fires once), notices each crash, reads from the log which failpoint
// caused it, and starts the operator again at once with the failpoints not yet hit armed.
//
// A restart does not wait out the kubelet's crash-loop back-off (which grows with every crash
// of a pod's container) nor the crashed leader's Lease: the walk takes the Lease itself, deletes
// the crashed pod, arms the pod the Deployment makes instead while it waits for the Lease, and
// then hands the Lease over. So no operator reconciles before it is armed.
type failpointOperator struct {
	t         *testing.T // the walk's, for its progress log
	clientset *kubernetes.Clientset
	selector  labels.Selector
	http      *http.Client

	mu sync.Mutex
	// pod is the operator pod that runs armed; nil while a restart is under way. restarts is
	// its container's restart count when the walk took it: a higher one is a crash.
	pod      *corev1.Pod
	restarts int32
	// operation is the one under way, remaining its failpoints' crashes still to come.
	operation string
	remaining map[string]int
	// crashes of the whole walk, in order; problems are what went wrong outside the test's
	// goroutine (a crash no failpoint explains, a restart that failed).
	crashes  []failpointCrash
	problems []string

	stop chan struct{}
	done chan struct{}
}

type failpointCrash struct {
	operation, failpoint string
	// down is how long the operator was away: from the crash seen to the new pod armed.
	down time.Duration
}

// startFailpointOperator sets the failpoint build's environment on the operator Deployment
// (make test-failpoints deployed its image) and waits for it to run.
func startFailpointOperator(t *testing.T) *failpointOperator {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	o := &failpointOperator{
		t:         t,
		http:      &http.Client{Timeout: 5 * time.Second},
		remaining: map[string]int{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if o.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	deployment := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}
	if err := k8sClient.Get(ctx, key, deployment); err != nil {
		t.Fatal(err)
	}
	if operatorImage != "" && deployment.Spec.Template.Spec.Containers[0].Image != operatorImage {
		t.Fatalf("the operator Deployment runs %s, want the failpoint build %s", deployment.Spec.Template.Spec.Containers[0].Image, operatorImage)
	}
	if o.selector, err = metav1.LabelSelectorAsSelector(deployment.Spec.Selector); err != nil {
		t.Fatal(err)
	}
	// GOFAIL_FAILPOINTS is read when the process starts: crashOnPanic makes a failpoint's panic
	// in a reconcile end the process instead of being recovered. GOTRACEBACK=none leaves the
	// panic's first line, which names the failpoint, at the end of the log, where the container's
	// termination message (the log's last 2 KiB) keeps it: with the goroutine's stack printed
	// after it, CI's walk of 2026-11-27 found only the stack's tail there, the crashed
	// container's log could not be read, and the crash at memberUpgraded counted as no
	// failpoint's. A panic that is no failpoint's still shows its value.
	o.pod = setOperatorEnv(t,
		corev1.EnvVar{Name: "GOFAIL_HTTP", Value: fmt.Sprintf(":%d", gofailPort)},
		corev1.EnvVar{Name: "GOFAIL_FAILPOINTS", Value: "crashOnPanic=return"},
		corev1.EnvVar{Name: "GOTRACEBACK", Value: "none"})
	o.restarts = restartCount(o.pod)
	if o.restarts > 0 {
		t.Logf("the operator pod %s had restarted %d time(s) before the walk: %+v", o.pod.Name, o.restarts, o.pod.Status.ContainerStatuses)
	}
	if err := o.waitServing(ctx, o.pod); err != nil {
		t.Fatal(err)
	}
	go o.watch()
	t.Cleanup(func() { close(o.stop); <-o.done })
	return o
}

// pods are the operator's pods that are not being deleted.
func (o *failpointOperator) pods(ctx context.Context) ([]corev1.Pod, error) {
	return operatorPods(ctx, o.selector)
}

// arm starts an operation: its failpoints are armed on the running operator, and re-armed
// after each crash until each was hit as often as the operation says.
func (o *failpointOperator) arm(t *testing.T, op failpoints.Operation) {
	t.Helper()
	o.mu.Lock()
	o.operation = op.Name
	o.remaining = map[string]int{}
	for _, fp := range op.Failpoints {
		o.remaining[fp.Name] += fp.Times
	}
	o.mu.Unlock()
	if err := o.armPod(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// finish ends an operation: a failpoint it did not reach as often as listed fails the test (the
// list in test/failpoints cannot rot), and what is left armed is disarmed.
func (o *failpointOperator) finish(t *testing.T) {
	t.Helper()
	// A crash the operation's last step caused may not have been seen yet.
	_ = pollUntil(context.Background(), 15*time.Second, func(context.Context) (bool, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, n := range o.remaining {
			if n > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	pod := o.waitRunning(t)
	o.mu.Lock()
	left := map[string]int{}
	for name, n := range o.remaining {
		if n > 0 {
			left[name] = n
		}
	}
	op := o.operation
	o.remaining, o.operation = map[string]int{}, ""
	o.mu.Unlock()
	for _, name := range sortedKeys(left) {
		t.Errorf("%s: failpoint %s was not reached %d more time(s): nothing in the operation crossed it", op, name, left[name])
		if err := o.request(context.Background(), pod, http.MethodDelete, name, ""); err != nil {
			t.Errorf("disarm %s: %v", name, err)
		}
	}
}

// crashCount is how many crashes the walk has caused so far.
func (o *failpointOperator) crashCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.crashes)
}

// failed reports what went wrong in the background, for the test's goroutine to fail on.
func (o *failpointOperator) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(o.problems, "\n"))
}

// waitRunning waits until no restart is under way, and returns the running pod.
func (o *failpointOperator) waitRunning(t *testing.T) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := pollUntil(context.Background(), 2*restartTimeout, func(context.Context) (bool, error) {
		if err := o.failed(); err != nil {
			return false, err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		pod = o.pod
		return pod != nil, nil
	})
	if err != nil {
		t.Fatalf("the operator is not running again: %v", err)
	}
	return pod
}

// watch restarts the operator after each crash until the walk ends.
func (o *failpointOperator) watch() {
	defer close(o.done)
	ctx := context.Background()
	for {
		select {
		case <-o.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		o.mu.Lock()
		current, restarts := o.pod, o.restarts
		o.mu.Unlock()
		pod := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(current), pod)
		switch {
		case apierrors.IsNotFound(err):
			o.problem("operator pod %s disappeared without a crash", current.Name)
			pod = nil
		case err != nil:
			continue // the API server is busy; look again
		case pod.UID != current.UID:
			o.problem("operator pod %s was replaced without a crash", current.Name)
		case !crashed(pod, restarts):
			continue
		}
		if err := o.restart(ctx, current, pod); err != nil {
			o.problem("restarting the operator: %v", err)
			return
		}
	}
}

// crashed: the manager container has stopped since the walk took the pod, when it had
// restarted that many times.
func crashed(pod *corev1.Pod, restarts int32) bool {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == managerContainer && (st.RestartCount > restarts || st.State.Terminated != nil) {
			return true
		}
	}
	return pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil
}

func restartCount(pod *corev1.Pod) int32 {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == managerContainer {
			return st.RestartCount
		}
	}
	return 0
}

func (o *failpointOperator) problem(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.problems = append(o.problems, fmt.Sprintf(format, args...))
}

// restart holds the Lease, records what the crash was, deletes the crashed pod, arms the one
// that replaces it, then lets it lead.
func (o *failpointOperator) restart(ctx context.Context, old, crashedPod *corev1.Pod) (retErr error) {
	seen := time.Now()
	o.mu.Lock()
	o.pod = nil
	o.mu.Unlock()
	if err := o.holdLease(ctx); err != nil {
		return err
	}
	defer func() {
		// A walk that fails here must not leave the operator without a leader for the Lease's
		// hour: the next run on this cluster waited on it (seen here after a failed arm).
		if retErr != nil {
			retErr = errors.Join(retErr, o.releaseLease(context.Background()))
		}
	}()
	if crashedPod != nil {
		o.recordCrash(ctx, crashedPod)
		if err := k8sClient.Delete(ctx, crashedPod, client.GracePeriodSeconds(1)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete crashed pod %s: %w", crashedPod.Name, err)
		}
	}
	var next *corev1.Pod
	err := pollUntil(ctx, restartTimeout, func(ctx context.Context) (bool, error) {
		gone := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(old), gone); !apierrors.IsNotFound(err) {
			return false, nil // its container may still be running: it must not take the Lease
		}
		pods, err := o.pods(ctx)
		if err != nil || len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning || pods[0].Status.PodIP == "" {
			return false, nil //nolint:nilerr // a failed list is retried like a pod not yet running
		}
		next = &pods[0]
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("no new operator pod running after %s: %w", old.Name, err)
	}
	if err := o.waitServing(ctx, next); err != nil {
		return err
	}
	o.mu.Lock()
	o.pod, o.restarts = next, restartCount(next)
	var last failpointCrash
	if n := len(o.crashes); n > 0 && crashedPod != nil {
		o.crashes[n-1].down = time.Since(seen)
		last = o.crashes[n-1]
	}
	o.mu.Unlock()
	o.t.Logf("%s: crashed at %s, back in %v", last.operation, last.failpoint, last.down.Round(100*time.Millisecond))
	if err := o.armPod(ctx); err != nil {
		return err
	}
	return o.releaseLease(ctx)
}

// recordCrash reads from the crashed container's log which failpoint fired, and counts it.
func (o *failpointOperator) recordCrash(ctx context.Context, pod *corev1.Pod) {
	log := o.crashLog(ctx, pod)
	m := failpointPanic.FindStringSubmatch(log)
	o.mu.Lock()
	defer o.mu.Unlock()
	if m == nil {
		o.problems = append(o.problems, fmt.Sprintf("the operator (pod %s) stopped with no failpoint panic during %q; containers %+v; its log ends:\n%s",
			pod.Name, o.operation, pod.Status.ContainerStatuses, lastLines(log, 30)))
		o.crashes = append(o.crashes, failpointCrash{operation: o.operation})
		return
	}
	name := m[1]
	if o.remaining[name] <= 0 {
		o.problems = append(o.problems, fmt.Sprintf("failpoint %s fired during %q, which did not arm it", name, o.operation))
	}
	o.remaining[name]--
	o.crashes = append(o.crashes, failpointCrash{operation: o.operation, failpoint: name})
}

// crashLog is the log of the manager container that crashed: the previous one once the kubelet
// has started it again, the current one before. A read that fails is tried again for a while.
func (o *failpointOperator) crashLog(ctx context.Context, pod *corev1.Pod) string {
	// The crashed container's log can be gone (a walk once found it so, and had no way to
	// tell which failpoint fired); its termination message, the log's tail
	// (FallbackToLogsOnError), stays in the pod's status.
	for _, st := range pod.Status.ContainerStatuses {
		for _, terminated := range []*corev1.ContainerStateTerminated{st.LastTerminationState.Terminated, st.State.Terminated} {
			if st.Name == managerContainer && terminated != nil && failpointPanic.MatchString(terminated.Message) {
				return terminated.Message
			}
		}
	}
	var logs []string
	_ = pollUntil(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		logs = logs[:0]
		for _, previous := range []bool{true, false} {
			out, err := o.clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
				Container: managerContainer, Previous: previous, TailLines: ptrTo(int64(300)),
			}).DoRaw(ctx)
			if err != nil {
				logs = append(logs, fmt.Sprintf("(log previous=%t: %v)", previous, err))
				continue
			}
			logs = append(logs, string(out))
			if failpointPanic.Match(out) {
				logs = []string{string(out)}
				return true, nil
			}
		}
		return false, nil
	})
	return strings.Join(logs, "\n")
}

// holdLease makes the walk the leader: the crashed operator renews nothing any more, and the
// pods that replace it wait. A lease a live operator holds is never taken: only after a crash.
func (o *failpointOperator) holdLease(ctx context.Context) error {
	return o.updateLease(ctx, walkHolder, 3600)
}

// releaseLease lets the armed operator take the Lease at its next try: a Lease with no holder
// is free at once.
func (o *failpointOperator) releaseLease(ctx context.Context) error {
	return o.updateLease(ctx, "", 1)
}

func (o *failpointOperator) updateLease(ctx context.Context, holder string, seconds int32) error {
	return pollUntil(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		lease := &coordinationv1.Lease{}
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, lease)
		if apierrors.IsNotFound(err) {
			lease.ObjectMeta = metav1.ObjectMeta{Namespace: operatorNamespace, Name: leaseName}
		} else if err != nil {
			return false, nil //nolint:nilerr // retried until the poll's timeout
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &holder, &seconds
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		if lease.ResourceVersion == "" {
			err = k8sClient.Create(ctx, lease)
		} else {
			err = k8sClient.Update(ctx, lease)
		}
		return err == nil, nil // a conflict: read again
	})
}

// waitServing waits for gofail's endpoint of the pod to answer.
func (o *failpointOperator) waitServing(ctx context.Context, pod *corev1.Pod) error {
	err := pollUntil(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := o.list(ctx, pod)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("gofail's endpoint on pod %s (%s:%d) does not answer: %w", pod.Name, pod.Status.PodIP, gofailPort, err)
	}
	return nil
}

// armPod arms, on the running operator, each failpoint still to be hit as a panic that fires
// once, and checks that gofail took them.
func (o *failpointOperator) armPod(ctx context.Context) error {
	o.mu.Lock()
	pod := o.pod
	var terms []string
	want := map[string]string{}
	for name, n := range o.remaining {
		if n > 0 {
			term := fmt.Sprintf("1*panic(%q)", name)
			terms = append(terms, name+"="+term)
			want[name] = term
		}
	}
	o.mu.Unlock()
	if pod == nil || len(terms) == 0 {
		return nil
	}
	sort.Strings(terms)
	// A restarted manager's gofail endpoint answers as soon as gofail's own package is
	// initialised, before the packages that declare failpoints have registered theirs: "does not
	// exist" for a moment (seen here: a walk armed learnerPromoted 4.5 s after a crash, and was
	// refused). A failpoint missing from the build is still refused after the wait.
	var armErr error
	_ = pollUntil(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		armErr = o.request(ctx, pod, http.MethodPut, "failpoints", strings.Join(terms, ";"))
		return armErr == nil || !strings.Contains(armErr.Error(), "failpoint does not exist"), nil
	})
	if armErr != nil {
		return fmt.Errorf("arm %v: %w", terms, armErr)
	}
	armed, err := o.list(ctx, pod)
	if err != nil {
		return err
	}
	for name, term := range want {
		if armed[name] != term {
			return fmt.Errorf("failpoint %s is %q after arming, want %q (is it in the failpoint build?)", name, armed[name], term)
		}
	}
	return nil
}

// list is gofail's listing of every failpoint of the build and its terms.
func (o *failpointOperator) list(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url(pod, ""), nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %s: %w", o.url(pod, ""), resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %s", o.url(pod, ""), resp.Status, body)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if name, term, ok := strings.Cut(line, "="); ok {
			out[name] = term
		}
	}
	return out, nil
}

func (o *failpointOperator) request(ctx context.Context, pod *corev1.Pod, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, o.url(pod, path), strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		// DELETE of a failpoint that is not armed: it fired, or was never armed.
		if method == http.MethodDelete && strings.Contains(string(out), "disabled") {
			return nil
		}
		return fmt.Errorf("%s %s: %s %s", method, o.url(pod, path), resp.Status, out)
	}
	return nil
}

func (o *failpointOperator) url(pod *corev1.Pod, path string) string {
	return fmt.Sprintf("http://%s:%d/%s", pod.Status.PodIP, gofailPort, path)
}

// summary is one line per operation: its crashes and how long the operator was away for each.
func (o *failpointOperator) summary() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	var total time.Duration
	for _, c := range o.crashes {
		fmt.Fprintf(&b, "  %-28s %-28s back in %v\n", c.operation, c.failpoint, c.down.Round(100*time.Millisecond))
		total += c.down
	}
	fmt.Fprintf(&b, "  %d crashes; the operator was away %v in all", len(o.crashes), total.Round(time.Second))
	return b.String()
}
