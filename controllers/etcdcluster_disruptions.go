package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Voluntary disruptions: the PodDisruptionBudget counts the pods of the members etcd lists as
// voters, and the operator's own disruptions of serving members go through the Eviction API,
// which counts them against that budget together with a drain's.

// ensureDisruptionBudget makes the PodDisruptionBudget and the voter labels follow the voters
// etcd lists. While etcd does not answer, both are left as they are: the budget protects the
// quorum last seen, and a number guessed from the spec could only be lower than what a
// scale-down in progress needs.
func (r *EtcdClusterReconciler) ensureDisruptionBudget(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	return r.followVoters(ctx, c, obs, "")
}

// followVoters makes the budget and the labels say which members vote: those etcd was observed
// to list as voters, and promoted, if not "", a learner etcd has just made a voter. A budget is
// safe only while it asks at least what the pods it selects need, so the writes go in this
// order: a minAvailable that grows is raised first; then the voter label is taken off the pods
// of members that do not vote, and put on the voters'; last, the budget gets its selector and a
// minAvailable that shrinks. Any other order has a moment that allows a disruption too many: a
// promoted learner's pod labelled before minAvailable counts it, or minAvailable lowered while a
// removed voter's Ready pod is still labelled. The first reconcile of a cluster made by an
// earlier operator, whose budget selected every member pod, is the same case: were the
// voter-only selector set before the labels, it would select no pod at all, and the Eviction API
// evicts a pod that no budget selects without any check — a drain could take every member at
// once.
func (r *EtcdClusterReconciler) followVoters(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, promoted string) error {
	current := &policyv1.PodDisruptionBudget{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, current)
	exists := err == nil
	switch {
	case client.IgnoreNotFound(err) != nil:
		return fmt.Errorf("get PodDisruptionBudget: %w", err)
	case !obs.reachable && exists:
		return nil
	case !obs.reachable:
		// The bootstrap's pods are made with the voter label: they are the voters the cluster
		// forms with.
		return r.createOwned(ctx, c, resources.PodDisruptionBudget(c, int(c.Spec.Size)))
	}
	// minAvailable counts every voter etcd lists, ours or not: quorum does.
	voters, count := obs.voterNames(c), obs.voters()
	if promoted != "" {
		voters, count = append(voters, promoted), count+1
	}
	desired := resources.PodDisruptionBudget(c, count)
	if exists && minAvailable(current) < minAvailable(desired) {
		if err := r.patchBudget(ctx, current, desired.Spec.MinAvailable, current.Spec.Selector); err != nil {
			return err
		}
	}
	if err := r.labelVoters(ctx, obs, voters); err != nil {
		return err
	}
	if !exists {
		return r.createOwned(ctx, c, desired)
	}
	return r.patchBudget(ctx, current, desired.Spec.MinAvailable, desired.Spec.Selector)
}

// countPromoted has the budget count a learner etcd has just promoted at once, rather than at the
// next look: until then its Ready pod, not labelled, could be evicted without any check beside
// the one disruption the budget allows. A failure is only logged: the next look follows the
// voters anyway.
func (r *EtcdClusterReconciler) countPromoted(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, member string) {
	if err := r.followVoters(ctx, c, obs, member); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "the PodDisruptionBudget will count the promoted member at the next look", "member", member)
	}
}

func minAvailable(pdb *policyv1.PodDisruptionBudget) int {
	if pdb.Spec.MinAvailable == nil {
		return 0
	}
	return pdb.Spec.MinAvailable.IntValue()
}

// patchBudget gives the budget minAvailable and selector, if it has not got them.
func (r *EtcdClusterReconciler) patchBudget(ctx context.Context, pdb *policyv1.PodDisruptionBudget, minAvailable *intstr.IntOrString, selector *metav1.LabelSelector) error {
	if pdb.Spec.MinAvailable.String() == minAvailable.String() && equality.Semantic.DeepEqual(pdb.Spec.Selector, selector) {
		return nil
	}
	patch := client.MergeFrom(pdb.DeepCopy())
	pdb.Spec.MinAvailable, pdb.Spec.Selector = minAvailable, selector
	if err := r.Patch(ctx, pdb, patch); err != nil {
		return fmt.Errorf("update PodDisruptionBudget: %w", err)
	}
	return nil
}

// labelVoters puts the voter label on the pods of voters and takes it off every other member
// pod: off first, so that no moment counts a member that does not vote beside those that do.
// Pods being deleted are left as they are: the budget no longer counts them.
func (r *EtcdClusterReconciler) labelVoters(ctx context.Context, obs *observation, voters []string) error {
	names := make([]string, 0, len(obs.pods))
	for name := range obs.pods {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, labelling := range []bool{false, true} {
		for _, name := range names {
			pod := obs.pods[name]
			voter := slices.Contains(voters, name)
			if voter != labelling || !pod.DeletionTimestamp.IsZero() || (pod.Labels[resources.LabelVoter] == "true") == voter {
				continue
			}
			patch := client.MergeFrom(pod.DeepCopy())
			if voter {
				pod.Labels[resources.LabelVoter] = "true"
			} else {
				delete(pod.Labels, resources.LabelVoter)
			}
			if err := r.Patch(ctx, pod, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("set the voter label of pod %s to %t: %w", name, voter, err)
			}
		}
	}
	return nil
}

// voterNames are the members etcd lists as voters.
func (obs *observation) voterNames(c *etcdv1alpha1.EtcdCluster) []string {
	var out []string
	for _, m := range obs.members {
		if name := memberName(c, m); name != "" && !m.IsLearner {
			out = append(out, name)
		}
	}
	return out
}

// votes says whether member votes as last observed: in etcd's member list or, while etcd does
// not answer, in status's (what it last listed). A pod made for such a member carries the voter
// label from the start.
func (obs *observation) votes(c *etcdv1alpha1.EtcdCluster, member string) bool {
	if obs.reachable {
		return slices.Contains(obs.voterNames(c), member)
	}
	return slices.Contains(lastVoters(c), member)
}

// disruptionOf decides, in the one place that does, whether taking down member's pod for step
// is a voluntary disruption of a serving member. Such a disruption goes through the Eviction API
// (takeDown, upgradeMember), so that the budget counts the operator's disruption and a drain's
// together and neither can take a member the other counts on; while the budget refuses, the
// step waits, and it never becomes a delete instead. why says why, for the logs.
func disruptionOf(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, member string) (disrupts bool, why string) {
	switch {
	case !obs.reachable:
		return false, "no quorum serves (the cluster never formed, or lost quorum and is being recovered, its members done without fenced): " +
			"there is no quorum for the budget to protect, and it must not hold the way back"
	case step.Action == membership.RemoveMember && member == step.Member:
		return false, "etcd has just removed the member: it votes no more"
	case !slices.Contains(obs.voterNames(c), member):
		return false, "the member does not vote (a learner, a member etcd no longer lists, a pod that never joined): " +
			"its going costs no quorum, and the budget does not count its pod"
	case step.Operation == membership.OpRestoring:
		return false, "an in-place restore stops every member, as the user asked: the budget would let one go and hold the others for ever"
	case obs.voters() < 3:
		return false, "the budget of one or two voters allows no disruption at all, as both are needed: through it the step would wait for ever; " +
			"and the same budget refuses a drain every Ready voter, so no drain adds a disruption to this one"
	}
	return true, "a voter of a cluster that serves: the budget decides"
}

// takeDown ends a member's pod for step: evicted when disruptionOf says it is a disruption of a
// serving member, else deleted; either way only if it is still the pod observed (its UID).
func (r *EtcdClusterReconciler) takeDown(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, pod *corev1.Pod) error {
	member := pod.Labels[resources.LabelMember]
	disrupts, why := disruptionOf(c, obs, step, member)
	ctrl.LoggerFrom(ctx).Info("taking a member's pod down", "cluster", c.Name, "member", member, "action", step.Action, "evict", disrupts, "why", why)
	if disrupts {
		return r.evict(ctx, pod)
	}
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); ignoreGone(err) != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// evict asks the API server to evict pod, which it does only if every PodDisruptionBudget that
// selects the pod allows one disruption more (or the pod is not Ready: AlwaysAllow). A refusal
// for a budget is a *disruptionHeld; one for the API server's load (also 429) is an error.
func (r *EtcdClusterReconciler) evict(ctx context.Context, pod *corev1.Pod) error {
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := r.SubResource("eviction").Create(ctx, pod, eviction)
	if cause, refused := budgetRefusal(err); refused {
		return &disruptionHeld{pod: pod.Name, cause: cause}
	}
	if ignoreGone(err) != nil {
		return fmt.Errorf("evict pod %s: %w", pod.Name, err)
	}
	return nil
}

// budgetRefusal says whether err is an eviction refused for a budget, and what the API server
// said of it ("The disruption budget c does not allow evicting pods currently", "... is still
// being processed by the server").
func budgetRefusal(err error) (cause string, refused bool) {
	var status apierrors.APIStatus
	if !apierrors.IsTooManyRequests(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return "", false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause {
			return c.Message, true
		}
	}
	return "", false
}

// disruptionHeld is an eviction the API server refused for the PodDisruptionBudget: most likely
// a node is being drained and the members it took are not back yet, or the budget has not yet
// counted a change. Not a failure: the step waits, is decided again at the next look, and is
// taken once the budget allows it.
type disruptionHeld struct {
	pod   string
	cause string
}

func (e *disruptionHeld) Error() string {
	return fmt.Sprintf("the PodDisruptionBudget does not let pod %s go now: %s", e.pod, e.cause)
}

// waiting is the step as reported while the budget holds it.
func (e *disruptionHeld) waiting(step membership.Step) membership.Step {
	step.Action = membership.Wait
	step.Reason = fmt.Sprintf("waiting for the PodDisruptionBudget, which allows no disruption now (%s; most likely a node is being drained), before %s",
		e.cause, step.Reason)
	return step
}
