package controllers

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A member pod placed on a node that never gets to run etcd — its volume cannot be attached or
// mounted, its sandbox cannot be made — shows nothing wrong on the pod itself: its containers
// wait in ContainerCreating, as every pod's do for a few seconds. Only the events about the pod
// say why. This file finds such pods and reads the cause from those events, for status alone:
// the decision (membership.Next) never sees it.

// stuckStartingGrace is how long a member's pod may sit on its node without starting before
// status names it: attaching and mounting a volume, making the sandbox and pulling etcd's image
// take seconds to a minute on a healthy node, and the kubelet itself gives up waiting for a
// pod's volumes after about two minutes (its FailedMount "Unable to attach or mount volumes …
// timed out waiting for the condition"), by when the events say why.
const stuckStartingGrace = 2 * time.Minute

// stuckCauseRefresh is how often the events of a pod that stays stuck are read again. The API
// server keeps no watch cache for events (kube-apiserver's default), so each read lists the
// namespace's events from etcd: a cluster reconciled every few seconds must not do that each
// time. A cause that changes shows within this long.
const stuckCauseRefresh = 30 * time.Second

// maxCauseLength bounds the event message quoted in status: enough for a CSI driver's error,
// short enough that a few stuck members keep the Degraded message readable.
const maxCauseLength = 300

// startingReasons are the kubelet's waiting reasons for a container that has never run: the
// pod's volumes, sandbox or image are still being prepared (PodInitializing: its init
// containers are).
var startingReasons = []string{"ContainerCreating", "PodInitializing"}

// startingSince says, for a member pod placed on a node whose containers wait to start, since
// when they have, and the waiting reason; zero when the pod is not placed, is going away, or no
// container waits to start.
func startingSince(pod *corev1.Pod) (time.Time, string) {
	if pod.Spec.NodeName == "" || !pod.DeletionTimestamp.IsZero() {
		return time.Time{}, ""
	}
	reason := ""
	for _, st := range slices.Concat(pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses) {
		if w := st.State.Waiting; w != nil && slices.Contains(startingReasons, w.Reason) {
			reason = w.Reason
			break
		}
	}
	if reason == "" {
		return time.Time{}, ""
	}
	var since time.Time
	for _, cond := range pod.Status.Conditions {
		// The later of when the scheduler placed the pod (the kubelet starts from there) and
		// when its containers stopped: a pod that ran starts again after its node restarts,
		// and has waited only since then.
		placed := cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue
		stopped := cond.Type == corev1.ContainersReady && cond.Status == corev1.ConditionFalse
		if (placed || stopped) && cond.LastTransitionTime.After(since) {
			since = cond.LastTransitionTime.Time
		}
	}
	if since.IsZero() {
		since = pod.CreationTimestamp.Time
	}
	return since, reason
}

// diagnoseStuckPods names, in obs.stuckPods, the member pods that have sat on their node without
// starting for longer than stuckStartingGrace, with the cause the newest Warning event about
// the pod gives. A pod with no Warning event is not named: it may be pulling a large image.
// Runs after diagnosePods: a pod whose problem the pod itself shows needs no events.
func (r *EtcdClusterReconciler) diagnoseStuckPods(ctx context.Context, obs *observation) {
	obs.stuckPods = map[string]string{}
	now := r.now()
	for name, pod := range obs.pods {
		since, waiting := startingSince(pod)
		if obs.podProblems[name] != "" || since.IsZero() || now.Sub(since) < stuckStartingGrace {
			continue
		}
		cause, err := r.stuckCause(ctx, pod, since, now)
		if err != nil {
			// Reporting must not stop the reconcile: say that the cause could not be read.
			ctrl.LoggerFrom(ctx).Info("cannot read the events of a member pod that does not start", "member", name, "error", err)
			cause = fmt.Sprintf("its events could not be read (%v); see kubectl describe pod %s", err, pod.Name)
		}
		if cause != "" {
			obs.stuckPods[name] = fmt.Sprintf("%s for over %v on node %s; %s", waiting, stuckStartingGrace, pod.Spec.NodeName, cause)
		}
	}
}

// stuckCause is what the events about pod since it began waiting say stops it, or "" when no
// Warning event does; read from the API server at most every stuckCauseRefresh.
//
// Core Events are read uncached, by a List with field selectors (this pod, by UID: not an
// earlier pod of the same name), only for a pod already stuck. An informer on Events would hold
// every event of every workload in the watched namespaces, which the manager's cache
// (CacheOptions) exists to avoid, and events cannot be selected by the operator's label. So the
// operator needs only the list verb on events, no watch.
func (r *EtcdClusterReconciler) stuckCause(ctx context.Context, pod *corev1.Pod, since, now time.Time) (string, error) {
	if cause, ok := r.stuckCauses.get(pod.UID, now); ok {
		return cause, nil
	}
	events := &corev1.EventList{}
	if err := r.APIReader.List(ctx, events, client.InNamespace(pod.Namespace), client.MatchingFields{
		"involvedObject.kind": "Pod",
		"involvedObject.name": pod.Name,
		"involvedObject.uid":  string(pod.UID),
		"type":                corev1.EventTypeWarning,
	}); err != nil {
		return "", fmt.Errorf("list events of pod %s: %w", pod.Name, err)
	}
	cause := causeFromEvents(pod, since, events.Items)
	r.stuckCauses.put(pod.UID, cause, now)
	return cause, nil
}

// kubeletStillWaiting starts the message of the kubelet's FailedMount event that says only that
// it gave up waiting for the pod's volumes; the attach-detach controller's or the volume
// plugin's own event, recurring beside it, says why.
const kubeletStillWaiting = "Unable to attach or mount volumes:"

// causeFromEvents is "<reason>: <message>" of the newest Warning event about pod (this pod, by
// UID) seen since it began waiting, or "": an earlier one (a readiness probe that failed before
// its node restarted) is not why it waits. The scheduler's FailedScheduling is from before the
// pod was placed, so never the cause either. The kubelet's "Unable to attach or mount volumes … timed out" counts only when no other
// event says more: each problem recurs every minute or two, and taking whichever came last
// would switch status, and the Degraded event, between the two at every recurrence.
func causeFromEvents(pod *corev1.Pod, since time.Time, events []corev1.Event) string {
	var cause *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.UID != pod.UID || e.Reason == "FailedScheduling" || lastSeen(e).Before(since) {
			continue
		}
		if cause == nil || saysMore(e, cause) {
			cause = e
		}
	}
	if cause == nil {
		return ""
	}
	return cause.Reason + ": " + tidyEventMessage(cause.Message)
}

// saysMore: event e tells the cause better than other: the kubelet's "still waiting" only when
// it is all there is, then the one seen last, then by name, so that the choice does not depend
// on the order the API server lists them in.
func saysMore(e, other *corev1.Event) bool {
	eWaits, otherWaits := strings.HasPrefix(e.Message, kubeletStillWaiting), strings.HasPrefix(other.Message, kubeletStillWaiting)
	if eWaits != otherWaits {
		return otherWaits
	}
	if c := lastSeen(e).Compare(lastSeen(other)); c != 0 {
		return c > 0
	}
	return e.Name > other.Name
}

// lastSeen is when an event last happened, as whichever API wrote it records it.
func lastSeen(e *corev1.Event) time.Time {
	seen := e.CreationTimestamp.Time
	for _, t := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if t.After(seen) {
			seen = t
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(seen) {
		seen = e.Series.LastObservedTime.Time
	}
	return seen
}

// containerRuntimeID is a sandbox's or container's ID, new at every attempt: quoted as it is,
// each retry would change the message, and status and its event with it.
var containerRuntimeID = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// tidyEventMessage keeps what an event message says about the cause, and no more than
// maxCauseLength characters of it.
func tidyEventMessage(message string) string {
	message = strings.TrimPrefix(message, "(combined from similar events): ")
	message = containerRuntimeID.ReplaceAllString(message, "…")
	message = strings.Join(strings.Fields(message), " ")
	if runes := []rune(message); len(runes) > maxCauseLength {
		message = string(runes[:maxCauseLength-1]) + "…"
	}
	return message
}

// stuckCauses remembers, by pod UID, the cause last read from a stuck pod's events, and when.
// Entries older than stuckCauseRefresh are dropped at every write, so it holds only pods found
// stuck within the last stuckCauseRefresh.
type stuckCauses struct {
	mu   sync.Mutex
	read map[types.UID]stuckCauseRead
}

type stuckCauseRead struct {
	cause string
	at    time.Time
}

func (s *stuckCauses) get(uid types.UID, now time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	read, ok := s.read[uid]
	if !ok || now.Sub(read.at) >= stuckCauseRefresh || now.Before(read.at) {
		return "", false
	}
	return read.cause, true
}

func (s *stuckCauses) put(uid types.UID, cause string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read == nil {
		s.read = map[types.UID]stuckCauseRead{}
	}
	for old, read := range s.read {
		if now.Sub(read.at) >= stuckCauseRefresh {
			delete(s.read, old)
		}
	}
	s.read[uid] = stuckCauseRead{cause: cause, at: now}
}
