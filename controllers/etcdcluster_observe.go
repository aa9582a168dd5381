package controllers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// observation is everything one reconcile learnt about a cluster, from Kubernetes and etcd.
type observation struct {
	pods map[string]*corev1.Pod
	pvcs map[string]*corev1.PersistentVolumeClaim
	// pvcsDeleting are the members whose claims are being deleted (not in pvcs).
	pvcsDeleting map[string]bool

	// etcd: the member list answered (a quorum serves), and what each member said.
	reachable bool
	etcdErr   error
	clusterID uint64
	members   []etcd.Member
	statuses  map[uint64]etcd.MemberStatus
	leaderID  uint64
	client    etcd.Client
	// unhealthy says, for each member etcd lists that is not healthy, why; see memberHealth.
	unhealthy map[uint64]string
	// podProblems says, by member name, why a member's pod cannot run; see podProblem.
	podProblems map[string]string
	// stuckPods says, by member name, why a member's pod placed on a node has not started
	// there for long, from the events about it; see diagnoseStuckPods. For status only: the
	// decision does not read it.
	stuckPods map[string]string

	access *access
	// defragmenting is the member being defragmented in the background, or "".
	defragmenting string
	// rootPassword is the root password etcd accepted (spec.auth); authKnown says whether
	// etcd answered if authentication is on, and authEnabled what it answered.
	rootPassword string
	authKnown    bool
	authEnabled  bool

	// recovery is what a recovery from a quorum lost for good needs; see etcdcluster_quorum.go.
	recovery quorumRecoveryObservation
	// caRotation is the CA rotation's step, decided once membership had nothing to do; see
	// etcdcluster_carotation.go.
	caRotation *caRotationObservation

	// corrupt is the evidence of each member found corrupt, by name; corruptAlarms the member
	// IDs etcd raised CORRUPT for; consistency the comparison of the members' hashes that ended
	// since the last look, if one did. See etcdcluster_corruption.go.
	corrupt       map[string]string
	corruptAlarms []uint64
	consistency   *consistencyResult
}

func (r *EtcdClusterReconciler) observe(ctx context.Context, c *etcdv1alpha1.EtcdCluster, a *access) (*observation, error) {
	obs := &observation{
		access:    a,
		pods:      map[string]*corev1.Pod{},
		pvcs:      map[string]*corev1.PersistentVolumeClaim{},
		statuses:  map[uint64]etcd.MemberStatus{},
		unhealthy: map[uint64]string{},
	}
	selector := client.MatchingLabels(resources.Selector(c))
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), selector); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		if name := pods.Items[i].Labels[resources.LabelMember]; name != "" {
			obs.pods[name] = &pods.Items[i]
		}
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.List(ctx, pvcs, client.InNamespace(c.Namespace), selector); err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	obs.pvcsDeleting = map[string]bool{}
	for i := range pvcs.Items {
		name := pvcs.Items[i].Labels[resources.LabelMember]
		switch {
		case name == "":
		case pvcs.Items[i].DeletionTimestamp.IsZero():
			obs.pvcs[name] = &pvcs.Items[i]
		default:
			// A claim being deleted is data going away: it must not bring its member back. But
			// its data is there while a pod uses it, and that member's etcd may still answer.
			obs.pvcsDeleting[name] = true
		}
	}
	obs.diagnosePods()
	r.diagnoseStuckPods(ctx, obs)
	obs.defragmenting = r.defrags.member(client.ObjectKeyFromObject(c).String())
	r.observeEtcd(ctx, c, obs)
	r.observeCorruption(c, obs)
	if err := r.observeQuorumRecovery(ctx, c, obs); err != nil {
		return nil, err
	}
	return obs, nil
}

// observeEtcd asks etcd for its member list, then each started member for its status. A
// failure is an observation (no quorum, member down), not an error of the reconcile.
func (r *EtcdClusterReconciler) observeEtcd(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) {
	endpoints := knownClientURLs(c, obs)
	if len(endpoints) == 0 {
		return
	}
	cl, password, err := r.connect(c, obs.access, endpoints)
	if err != nil {
		obs.etcdErr = err
		return
	}
	obs.client, obs.rootPassword = cl, password
	if root := obs.access.root; root != nil {
		if set, ok := root.setBefore(password); ok {
			ctrl.LoggerFrom(ctx).Info("etcd has a root password the operator set before the last one: its data comes from a snapshot taken before a rotation; the Secret's is set next",
				"secret", c.Spec.Auth.RootSecretName, "setAt", set.At)
		}
	}
	obs.clusterID, obs.members, err = cl.Members(ctx)
	if err != nil {
		obs.etcdErr = r.refusedTheOperator(c, err)
		return
	}
	obs.reachable = true
	if c.Spec.Auth != nil {
		enabled, err := cl.AuthEnabled(ctx)
		obs.authEnabled, obs.authKnown = enabled, err == nil
	}
	var refused error
	obs.statuses, refused = r.memberStatuses(ctx, cl, obs)
	if refused != nil {
		obs.etcdErr = r.refusedTheOperator(c, refused)
		return
	}
	for _, st := range obs.statuses {
		if st.LeaderID != 0 {
			obs.leaderID = st.LeaderID
		}
	}
	obs.unhealthy = memberHealth(c, obs)
}

// refusedTheOperator is err as an accessError when etcd refused the operator's user
// (etcd.RefusedTheUser): asked again by the same client, etcd answers the same, and what it
// withholds (the member list, the members' status) is what every step is decided on. Any other
// error is returned as it is. The refused client is dropped: the next look logs in afresh.
func (r *EtcdClusterReconciler) refusedTheOperator(c *etcdv1alpha1.EtcdCluster, err error) error {
	if !etcd.RefusedTheUser(err) {
		return err
	}
	r.Etcd.Forget(client.ObjectKeyFromObject(c).String())
	if c.Spec.Auth == nil {
		// etcd refuses a client with no user only while authentication is on.
		return &accessError{reason: etcdv1alpha1.ReasonAuthRequired, err: fmt.Errorf(
			"etcd has authentication on and refuses the operator, which has no user to connect as: EtcdCluster %s has no spec.auth (%w). "+
				"Its data comes from a snapshot of a cluster with authentication on, or authentication was turned on outside the operator: "+
				"set spec.auth.rootSecretName to a Secret whose %q key holds etcd's root password (for restored data, root's password when the snapshot was taken)",
			c.Name, err, rootPasswordKey)}
	}
	return &accessError{reason: etcdv1alpha1.ReasonCredentialsRejected, err: fmt.Errorf(
		"etcd refuses the operator's calls as root (%w): the root user or its role was changed outside the operator. "+
			"etcd's root user must have the root role, and Secret %s the password etcd has",
		err, c.Spec.Auth.RootSecretName)}
}

// memberHealth is the one place that judges members' health, for the decision and for status
// alike. Healthy is what the next step needs of the members that remain: etcd answers with no
// error, the member has applied the log to within membership.MaxLagEntries of the leader's
// (a member replaying after a restart answers long before it has caught up), and a voter's pod
// is Ready (the client Service sends clients only to ready pods). It returns why each member
// that is not healthy is not.
func memberHealth(c *etcdv1alpha1.EtcdCluster, obs *observation) map[uint64]string {
	leaderIndex := obs.statuses[obs.leaderID].RaftIndex
	out := map[uint64]string{}
	for _, m := range obs.members {
		st, answered := obs.statuses[m.ID]
		name := memberName(c, m)
		switch {
		case obs.defragmenting != "" && name == obs.defragmenting:
			// Busy by the operator's doing: it answers nothing, and its readiness may lapse,
			// until the rewrite ends; the decision waits for it meanwhile.
		case !answered && !m.Started():
			out[m.ID] = "not started yet" + obs.podTrouble(name)
		case !answered:
			out[m.ID] = "did not answer its status request" + obs.podTrouble(name)
		case len(st.Errors) > 0:
			out[m.ID] = strings.Join(st.Errors, ", ")
		case leaderIndex > st.RaftAppliedIndex+membership.MaxLagEntries:
			// No indexes in the text: they move with every write, and status would move with them.
			out[m.ID] = "catching up with the leader's log"
		case !m.IsLearner && !podReady(obs.pods[name]):
			out[m.ID] = "pod not ready"
		}
	}
	return out
}

// voters is how many voting members etcd lists.
func (obs *observation) voters() int {
	n := 0
	for _, m := range obs.members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

func podReady(pod *corev1.Pod) bool {
	if pod == nil || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// diagnosePods records, once per observation, why each member pod that cannot run cannot.
func (obs *observation) diagnosePods() {
	obs.podProblems = map[string]string{}
	for name, pod := range obs.pods {
		if problem := podProblem(pod, obs.pvcs[name]); problem != "" {
			obs.podProblems[name] = problem
		}
	}
}

// podTrouble is ": " and why the member's pod does not run (podProblems, stuckPods), or "".
func (obs *observation) podTrouble(name string) string {
	if trouble := cmp.Or(obs.podProblems[name], obs.stuckPods[name]); trouble != "" {
		return ": " + trouble
	}
	return ""
}

// imagePullReasons are the waiting reasons of a container whose image the kubelet cannot pull.
var imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

// waitingReasonsThatStick are container waiting reasons that do not resolve by themselves:
// the member will not run until someone changes something.
var waitingReasonsThatStick = slices.Concat(imagePullReasons, []string{
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
})

// podProblem says why a member's pod cannot run, from what the scheduler and the kubelet
// recorded on it, or "" when nothing is known to be wrong. claim is the member's claim, when
// it has one.
func podProblem(pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) string {
	if pod == nil {
		return ""
	}
	if !nodeLostSince(pod).IsZero() {
		return "NodeLost: evicted from node " + pod.Spec.NodeName + ", which stopped answering the API server; its etcd may still run there. The pod ends when the node answers again or its Node object is deleted"
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			problem := "Unschedulable: " + cond.Message
			if claim != nil && claim.Status.Phase == corev1.ClaimPending {
				problem += " (claim " + claim.Name + " is Pending)"
			}
			return problem
		}
	}
	for _, st := range pod.Status.ContainerStatuses {
		w := st.State.Waiting
		if w == nil || !slices.Contains(waitingReasonsThatStick, w.Reason) {
			continue
		}
		if w.Reason == "CrashLoopBackOff" {
			// Not the kubelet's message or the restart count: both change at every restart.
			problem := "CrashLoopBackOff"
			if t := st.LastTerminationState.Terminated; t != nil {
				problem += fmt.Sprintf(": last exit code %d (%s); see kubectl logs --previous %s", t.ExitCode, t.Reason, pod.Name)
			}
			return problem
		}
		if w.Message != "" {
			return w.Reason + ": " + w.Message
		}
		return w.Reason
	}
	if pod.Status.Phase == corev1.PodFailed {
		return "pod failed: " + pod.Status.Reason + " " + pod.Status.Message
	}
	return ""
}

// memberStatuses asks every member whose pod may answer (mayAnswer) for its status, all at
// once: a member that is restarting would otherwise hold the reconcile for the call timeout. A
// member that does not answer is left out; one that refuses the operator's user
// (etcd.RefusedTheUser) answered, and its refusal is returned: that of the first member by
// name, so that the same refusal reads the same at every look.
func (r *EtcdClusterReconciler) memberStatuses(ctx context.Context, cl etcd.Client, obs *observation) (map[uint64]etcd.MemberStatus, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	statuses := map[uint64]etcd.MemberStatus{}
	refusals := map[string]error{}
	for _, m := range obs.members {
		pod, ok := obs.pods[m.Name]
		if m.Name == "" || len(m.ClientURLs) == 0 || !ok || !mayAnswer(pod) {
			continue
		}
		wg.Go(func() {
			st, err := cl.Status(ctx, m.ClientURLs[0])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case etcd.RefusedTheUser(err):
				refusals[m.Name] = err
			case err == nil:
				statuses[m.ID] = st
			}
		})
	}
	wg.Wait()
	if len(refusals) > 0 {
		first := slices.Min(slices.Collect(maps.Keys(refusals)))
		return statuses, fmt.Errorf("member %s: %w", first, refusals[first])
	}
	return statuses, nil
}

// mayAnswer says whether the etcd of a member's pod may answer. One with no IP cannot, nor one
// being deleted, nor one still running its init containers (a member restoring its data in its
// pod, for seconds): dialling it would only spend the call timeout, in which the reconcile
// sees nothing else, such as the other members becoming ready.
func mayAnswer(pod *corev1.Pod) bool {
	if pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, st := range pod.Status.InitContainerStatuses {
		if t := st.State.Terminated; t == nil || t.ExitCode != 0 {
			return false
		}
	}
	return true
}

// knownClientURLs are the client URLs of the members whose pods may answer (mayAnswer):
// dialling a member that cannot would only spend the call timeout. Sorted, so the cached etcd
// client is reused while they hold.
func knownClientURLs(c *etcdv1alpha1.EtcdCluster, obs *observation) []string {
	urls := make([]string, 0, len(obs.pods))
	for name, pod := range obs.pods {
		if mayAnswer(pod) {
			urls = append(urls, resources.ClientURL(c, name))
		}
	}
	sort.Strings(urls)
	return urls
}

// memberName is the member's name, from etcd's name or, for a learner that has not started,
// from its peer URL.
func memberName(c *etcdv1alpha1.EtcdCluster, m etcd.Member) string {
	if m.Name != "" {
		return m.Name
	}
	for _, u := range m.PeerURLs {
		if name, ok := resources.MemberNameFromPeerURL(c, u); ok {
			return name
		}
	}
	return ""
}

// taintEvictionReason is the reason of the DisruptionTarget condition the taint eviction
// controller sets on a pod it deletes for its node's NoExecute taint.
const taintEvictionReason = "DeletionByTaintManager"

// nodeLostSince is when pod, placed on a node, was evicted for that node's NoExecute taint
// (node.kubernetes.io/unreachable or not-ready: the node stopped answering), if the pod is still
// there: no kubelet confirms its end while the node is gone. Zero otherwise. A pod evicted from
// a node that answers ends within its grace period.
func nodeLostSince(pod *corev1.Pod) time.Time {
	if pod.DeletionTimestamp.IsZero() || pod.Spec.NodeName == "" {
		return time.Time{}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue && cond.Reason == taintEvictionReason {
			return cond.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// initialClusterStale: the pod of a learner that has not started names other members in its
// initial cluster than a member joining now would (joiningInitialCluster): one was removed, or
// started, since the pod was made.
func initialClusterStale(c *etcdv1alpha1.EtcdCluster, obs *observation, name string, pod *corev1.Pod) bool {
	had := resources.MembersOfInitialCluster(pod.Annotations[resources.AnnotationInitialCluster])
	want := resources.MembersOfInitialCluster(joiningInitialCluster(c, obs, name))
	slices.Sort(had)
	slices.Sort(want)
	return !slices.Equal(had, want)
}

// decisionInput joins the observation, member by member, into what membership.Next needs.
func (obs *observation) decisionInput(c *etcdv1alpha1.EtcdCluster, now time.Time) membership.Observed {
	byName := map[string]*membership.Member{}
	get := func(name string) *membership.Member {
		if m, ok := byName[name]; ok {
			return m
		}
		m := &membership.Member{Name: name}
		byName[name] = m
		return m
	}
	for _, em := range obs.members {
		name := memberName(c, em)
		if name == "" {
			continue // not one of ours: never act on it
		}
		m := get(name)
		m.ID, m.Started, m.IsLearner = em.ID, em.Started(), em.IsLearner
		if st, ok := obs.statuses[em.ID]; ok {
			_, unhealthy := obs.unhealthy[em.ID]
			m.Healthy = !unhealthy
			m.Version = st.Version
			m.RaftIndex = st.RaftIndex
			m.DBSizeBytes, m.DBSizeInUseBytes = st.DBSizeBytes, st.DBSizeInUseBytes
		}
		m.IsLeader = em.ID == obs.leaderID
		if pod, ok := obs.pods[name]; ok && em.IsLearner && !em.Started() {
			m.InitialClusterStale = initialClusterStale(c, obs, name, pod)
		}
	}
	for name, st := range obs.recovery.ownStatuses {
		m := get(name)
		m.RaftIndex, m.Answering, m.FollowsLeader = st.RaftIndex, true, st.LeaderID
	}
	for name, at := range obs.recovery.answered {
		get(name).Answered = at
	}
	voters := lastVoters(c)
	for _, name := range declaredLost(c) {
		if slices.Contains(voters, name) { // a name of no last voter declares nothing
			get(name).DeclaredLost = true
		}
	}
	for name, read := range obs.recovery.logReads {
		if m := get(name); read.log != nil {
			m.RaftIndex = read.log.CommitIndex // as it would report it (agent.LogState)
		} else {
			m.LogUnreadable = read.failed
		}
	}
	specHash := resources.MemberPodSpecHash(c)
	for name, pod := range obs.pods {
		m := get(name)
		m.PodExists = true
		m.PodTerminating = !pod.DeletionTimestamp.IsZero()
		m.PodFenced = resources.Fenced(pod)
		if pod.DeletionTimestamp != nil {
			m.PodStopDue = pod.DeletionTimestamp.Time
		}
		m.ForcedNewCluster = pod.Annotations[resources.AnnotationForceNewCluster] != ""
		m.PodCreated = pod.CreationTimestamp.Time
		if pod.Spec.NodeName == "" && !m.PodTerminating {
			m.UnscheduledSince = pod.CreationTimestamp.Time
		}
		m.NodeLostSince = nodeLostSince(pod)
		m.PodVersion = resources.PodEtcdVersion(pod)
		m.PodProblem = obs.podProblems[name]
		m.PodOutdated, m.PodSpecUnrecorded = podSpecOutdated(specHash, pod)
		if outdated, unrecorded := podTrustOutdated(obs.trustedCAHash(), pod); outdated || unrecorded {
			m.PodOutdated, m.PodSpecUnrecorded = m.PodOutdated || outdated, m.PodSpecUnrecorded || unrecorded
		}
	}
	for name := range obs.pvcsDeleting {
		get(name).PVCDeleting = true
	}
	wantSize := resources.MemberStorageSize(c)
	for name, pvc := range obs.pvcs {
		m := get(name)
		m.PVCExists = true
		requested := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		m.PVCTooSmall = claimTooSmall(c, pvc)
		m.PVCUnboundOutdated = pvc.Status.Phase == corev1.ClaimPending &&
			(requested.Cmp(wantSize) != 0 || storageClassChanged(c, pvc))
	}

	for name, evidence := range obs.corrupt {
		if m, ok := byName[name]; ok {
			m.Corrupt = evidence
		}
	}

	members := make([]membership.Member, 0, len(byName))
	for _, m := range byName {
		members = append(members, *m)
	}
	slices.SortFunc(members, func(a, b membership.Member) int {
		return cmp.Or(a.PodCreated.Compare(b.PodCreated), cmp.Compare(a.Name, b.Name))
	})

	return membership.Observed{
		Now:                  now,
		Reachable:            obs.reachable,
		EverFormed:           obs.reachable || c.Status.ClusterID != "",
		BootstrapPlan:        obs.bootstrapPlan(c),
		Members:              members,
		DesiredSize:          int(c.Spec.Size),
		DesiredVersion:       c.Spec.Version,
		DataSurvivesPod:      !c.Spec.Storage.Ephemeral,
		Paused:               c.Spec.Paused,
		AwaitingRestore:      c.Annotations[resources.AnnotationRestorePending],
		RestoreSeed:          c.Annotations[resources.AnnotationRestoreSeed],
		Defragmenting:        obs.defragmenting,
		AuthPending:          obs.authAnswered() && !obs.authEnabled,
		RootPasswordOutdated: obs.authAnswered() && obs.authEnabled && obs.rootPassword != obs.access.root.desired,
		Defrag:               defragPolicy(c),
		NoSpaceAlarm:         obs.hasAlarm("NOSPACE"),
		CorruptAlarms:        obs.corruptAlarms,
		QuotaBytes:           obs.quotaBytes(),
		LastVoters:           lastVoters(c),
		LastMembers:          lastMembers(c),
		Recovery:             recoveryPolicy(c, &obs.recovery, now),
	}
}

// storageClassChanged: the spec names a StorageClass the claim was not made with. A spec that
// names none leaves the class to the API server, which gives the claim the default class at
// creation: that is no change, and a claim waiting for its first pod (WaitForFirstConsumer)
// must not be made again for it.
func storageClassChanged(c *etcdv1alpha1.EtcdCluster, pvc *corev1.PersistentVolumeClaim) bool {
	return c.Spec.Storage.StorageClassName != nil && !ptr.Equal(pvc.Spec.StorageClassName, c.Spec.Storage.StorageClassName)
}

func defragPolicy(c *etcdv1alpha1.EtcdCluster) membership.DefragPolicy {
	d := c.Spec.Defragmentation
	p := membership.DefragPolicy{Enabled: d.Policy != etcdv1alpha1.DefragmentationDisabled, ThresholdPercent: int64(d.ThresholdPercent),
		MinFreeBytes: membership.DefragMinFreeBytes}
	if d.MinimumDBSize != nil {
		p.MinBytes = d.MinimumDBSize.Value()
	}
	return p
}

func (obs *observation) hasAlarm(alarm string) bool {
	for _, st := range obs.statuses {
		if slices.Contains(st.Alarms, alarm) {
			return true
		}
	}
	return false
}

func (obs *observation) quotaBytes() int64 {
	var quota int64
	for _, st := range obs.statuses {
		quota = max(quota, st.QuotaBytes)
	}
	return quota
}

// bootstrapPlan is the --initial-cluster recorded on the bootstrap members' pods or claims;
// during an in-place restore, the restored member's, as the old members' claims still hold
// the plan the cluster first formed with.
func (obs *observation) bootstrapPlan(c *etcdv1alpha1.EtcdCluster) []string {
	if seed := c.Annotations[resources.AnnotationRestoreSeed]; seed != "" {
		if pvc, ok := obs.pvcs[seed]; ok {
			return resources.MembersOfInitialCluster(pvc.Annotations[resources.AnnotationInitialCluster])
		}
		return nil
	}
	for _, annotations := range obs.annotationsOfMembers() {
		if annotations[resources.AnnotationClusterState] == "new" {
			return resources.MembersOfInitialCluster(annotations[resources.AnnotationInitialCluster])
		}
	}
	return nil
}

func (obs *observation) annotationsOfMembers() []map[string]string {
	var out []map[string]string
	for _, p := range obs.pods {
		out = append(out, p.Annotations)
	}
	for _, p := range obs.pvcs {
		out = append(out, p.Annotations)
	}
	return out
}

// authAnswered: the spec asks for authentication and etcd has said whether it is on.
func (obs *observation) authAnswered() bool {
	return obs.access.root != nil && obs.reachable && obs.authKnown
}

// podSpecOutdated says whether pod was made from an earlier spec than the one whose
// resources.MemberPodSpecHash is specHash (pod template, tuning, repository), and whether it
// predates the record of its spec (an earlier operator).
func podSpecOutdated(specHash string, pod *corev1.Pod) (outdated, unrecorded bool) {
	recorded, ok := pod.Annotations[resources.AnnotationPodSpecHash]
	return ok && recorded != specHash, !ok
}

// podTrustOutdated says whether pod was made when the user's TLS Secrets held other CAs than
// the ones whose resources.TrustedCAHash is current ("" when the cluster's provider is not
// Secrets), and whether it predates the record of them (an earlier operator). Its etcd trusts
// what it read at start: restarted, it loads the CAs the Secrets hold now.
func podTrustOutdated(current string, pod *corev1.Pod) (outdated, unrecorded bool) {
	if current == "" {
		return false, false
	}
	recorded, ok := pod.Annotations[resources.AnnotationTrustedCAHash]
	return ok && recorded != current, !ok
}

// trustedCAHash is what members of a cluster with tls.provider Secrets must trust now, as
// resources.TrustedCAHash; "" for any other cluster.
func (obs *observation) trustedCAHash() string {
	if obs.access == nil || obs.access.tls == nil {
		return ""
	}
	return obs.access.tls.trustedCAHash
}

// claimTooSmall says whether pvc requests less than spec.storage.size.
func claimTooSmall(c *etcdv1alpha1.EtcdCluster, pvc *corev1.PersistentVolumeClaim) bool {
	requested := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	wanted := resources.MemberStorageSize(c)
	return requested.Cmp(wanted) < 0
}
