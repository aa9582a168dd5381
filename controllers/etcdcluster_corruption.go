package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Corruption: members whose data diverged from the others' are found here, from three kinds
// of evidence, each read from etcd or from the member's own etcd, never guessed from
// Kubernetes' view alone:
//   - etcd's CORRUPT alarm, raised by its compaction hash check (or by hand), naming the member;
//   - the member's own start-up check, which compares its keyspace hash with its peers' and
//     refuses to start on a mismatch, logging "found data inconsistency with peers" (read from
//     the container's termination message);
//   - the operator's comparison of every member's HashKV at a common revision
//     (spec.corruptionCheck.interval), naming the minority of a strict majority.
// The evidence is kept in status.corruptMembers until the member is replaced and its alarm
// cleared; the decision (internal/membership/corruption.go) acts on it.

// initialCheckFailed is what etcd logs, and exits with, when its start-up corruption check
// finds its keyspace differs from its peers'.
const initialCheckFailed = "found data inconsistency with peers"

// observeCorruption gathers the evidence of corrupt members into obs.corrupt (by member name)
// and obs.corruptAlarms. A member's evidence, once recorded, stays until it is gone.
func (r *EtcdClusterReconciler) observeCorruption(c *etcdv1alpha1.EtcdCluster, obs *observation) {
	obs.corrupt = map[string]string{}
	for _, cm := range c.Status.CorruptMembers {
		obs.corrupt[cm.Name] = cm.Evidence
	}
	for _, st := range obs.statuses {
		for _, id := range st.CorruptMembers {
			if !slices.Contains(obs.corruptAlarms, id) {
				obs.corruptAlarms = append(obs.corruptAlarms, id)
			}
		}
	}
	slices.Sort(obs.corruptAlarms)
	for _, m := range obs.members {
		if slices.Contains(obs.corruptAlarms, m.ID) {
			if name := memberName(c, m); name != "" && obs.corrupt[name] == "" {
				obs.corrupt[name] = "etcd raised a CORRUPT alarm for member " + m.IDString()
			}
		}
	}
	for name, pod := range obs.pods {
		if why := failedInitialCheck(pod); why != "" && obs.corrupt[name] == "" {
			obs.corrupt[name] = why
		}
	}
	if result := r.consistency.take(client.ObjectKeyFromObject(c).String()); result != nil {
		obs.consistency = result
		for _, name := range result.Diverged {
			if obs.corrupt[name] == "" {
				obs.corrupt[name] = fmt.Sprintf("its keyspace hash at revision %d differs from the majority's (%s)", result.Revision, result.Message)
			}
		}
	}
}

// markCorruptClaims writes the evidence on the claim of each member found corrupt, before any
// step acts on it: the claim then outlives the member (claimOutlivesMember) even if the status
// that records the evidence is never written, or is read stale by the reconcile that removes it.
func (r *EtcdClusterReconciler) markCorruptClaims(ctx context.Context, obs *observation) error {
	for _, name := range slices.Sorted(maps.Keys(obs.corrupt)) {
		pvc, ok := obs.pvcs[name]
		if !ok || pvc.Annotations[resources.AnnotationCorruptEvidence] != "" {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		pvc.Annotations[resources.AnnotationCorruptEvidence] = truncate(obs.corrupt[name], 1024)
		if err := r.Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("mark the claim of corrupt member %s: %w", name, err)
		}
	}
	return nil
}

// failedInitialCheck is the evidence that the member's etcd refused to start on its start-up
// corruption check, from the etcd container's last exit, or "".
func failedInitialCheck(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != "etcd" {
			continue
		}
		for _, term := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if term != nil && strings.Contains(term.Message, initialCheckFailed) {
				return "its start-up check found its keyspace differs from its peers' (etcd: " + initialCheckFailed + "); it refuses to start"
			}
		}
	}
	return ""
}

// recordCorruption keeps status.corruptMembers: a member newly found is added with its
// evidence; one etcd no longer lists, with no CORRUPT alarm left for it and no claim of the
// cluster's, is done with and dropped. The claim kept for it is named.
func recordCorruption(c *etcdv1alpha1.EtcdCluster, obs *observation, now time.Time) {
	if obs.consistency != nil {
		c.Status.LastConsistencyCheck = &etcdv1alpha1.ConsistencyCheck{Time: metav1.NewTime(obs.consistency.Time),
			Revision: obs.consistency.Revision, Result: obs.consistency.Result, Diverged: obs.consistency.Diverged, Message: truncate(obs.consistency.Message, 1024)}
	}
	ids := map[string]uint64{}
	for _, m := range obs.members {
		ids[memberName(c, m)] = m.ID
	}
	var kept []etcdv1alpha1.CorruptMember
	for _, cm := range c.Status.CorruptMembers {
		id, inEtcd := ids[cm.Name]
		alarmed := cm.ID != "" && slices.ContainsFunc(obs.corruptAlarms, func(a uint64) bool { return etcd.FormatID(a) == cm.ID })
		_, claimed := obs.pvcs[cm.Name]
		if !obs.reachable || inEtcd || alarmed || claimed {
			if inEtcd {
				cm.ID = etcd.FormatID(id)
			}
			kept = append(kept, cm)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obs.corrupt)) {
		if slices.ContainsFunc(kept, func(cm etcdv1alpha1.CorruptMember) bool { return cm.Name == name }) {
			continue
		}
		if _, inEtcd := ids[name]; !inEtcd && obs.reachable {
			continue // gone already: nothing to replace
		}
		cm := etcdv1alpha1.CorruptMember{Name: name, Evidence: truncate(obs.corrupt[name], 1024), DetectedTime: metav1.NewTime(now)}
		if _, claimed := obs.pvcs[name]; claimed {
			cm.Claim = resources.PVCName(name) // kept when the member goes
		}
		if id, ok := ids[name]; ok {
			cm.ID = etcd.FormatID(id)
		}
		kept = append(kept, cm)
	}
	c.Status.CorruptMembers = kept
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// corruptMessage is the Degraded message naming the corrupt members and the evidence, or "".
func corruptMessage(c *etcdv1alpha1.EtcdCluster) string {
	var parts []string
	for _, cm := range c.Status.CorruptMembers {
		parts = append(parts, "member "+cm.Name+": "+cm.Evidence)
	}
	if len(parts) == 0 {
		return ""
	}
	return "data diverged from the other members' (" + strings.Join(parts, "; ") + "): each is taken out of the client Service and replaced while a quorum holds, its claim kept (status.corruptMembers)"
}

// fenceFromClientsOnly takes the members' pods out of the client Service, leaving them running.
func (r *EtcdClusterReconciler) fenceFromClientsOnly(ctx context.Context, obs *observation, names []string) error {
	var errs []error
	for _, name := range names {
		if pod, ok := obs.pods[name]; ok {
			if err := r.fenceFromClients(ctx, pod); err != nil {
				errs = append(errs, fmt.Errorf("take member %s out of the client Service: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// consistencyResult is one comparison of the members' keyspace hashes, made in the background.
type consistencyResult struct {
	Time     time.Time
	Revision int64
	membership.Consistency
}

// consistencyChecks run in the background: HashKV reads each member's whole database, which
// on a large one takes far longer than a reconcile should hold a worker. At most one runs per
// cluster; its result waits here for the next reconcile of the cluster to take it.
type consistencyChecks struct {
	mu      sync.Mutex
	running map[string]bool
	results map[string]*consistencyResult
}

func (cc *consistencyChecks) take(key string) *consistencyResult {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	result := cc.results[key]
	delete(cc.results, key)
	return result
}

func (cc *consistencyChecks) start(key string, check func() *consistencyResult) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.running == nil {
		cc.running, cc.results = map[string]bool{}, map[string]*consistencyResult{}
	}
	if cc.running[key] {
		return
	}
	cc.running[key] = true
	go func() {
		result := check()
		cc.mu.Lock()
		defer cc.mu.Unlock()
		delete(cc.running, key)
		cc.results[key] = result
	}()
}

// consistencyCheckDue: the policy is on, every member etcd lists is healthy and started, so
// that each can answer at a common revision, and the last comparison is older than the interval
// (or none was made) or than a member's etcd: a member that starts again on its data is compared
// once it has caught up, as etcd's own start-up check may not have compared it (a member that
// has not yet taken a raft snapshot knows no peers when the check runs, and passes it: seen with
// etcd 3.6.16).
func consistencyCheckDue(c *etcdv1alpha1.EtcdCluster, obs *observation, now time.Time) bool {
	cc := c.Spec.CorruptionCheck
	if cc.Policy == etcdv1alpha1.CorruptionCheckDisabled || !obs.reachable || len(obs.unhealthy) > 0 || len(obs.members) == 0 {
		return false
	}
	interval := 4 * time.Hour
	if cc.Interval != nil {
		interval = cc.Interval.Duration
	}
	last := c.Status.LastConsistencyCheck
	return last == nil || now.Sub(last.Time.Time) >= interval || etcdStartedSince(obs, last.Time.Time)
}

// etcdStartedSince: a member's etcd container started after t.
func etcdStartedSince(obs *observation, t time.Time) bool {
	for _, pod := range obs.pods {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "etcd" && cs.State.Running != nil && cs.State.Running.StartedAt.After(t) {
				return true
			}
		}
	}
	return false
}

// checkConsistencyInBackground compares every started member's HashKV at the lowest revision
// any of them has applied (each can hash it), on connections of its own.
func (r *EtcdClusterReconciler) checkConsistencyInBackground(c *etcdv1alpha1.EtcdCluster, obs *observation) {
	revision := int64(0)
	urls := map[string]string{}
	for _, m := range obs.members {
		st, ok := obs.statuses[m.ID]
		if !ok || !m.Started() || m.IsLearner {
			continue
		}
		if revision == 0 || st.Revision < revision {
			revision = st.Revision
		}
		urls[memberName(c, m)] = resources.ClientURL(c, memberName(c, m))
	}
	voters := obs.voters()
	cfg := obs.access.config(nil, obs.rootPassword)
	now := r.now
	r.consistency.start(client.ObjectKeyFromObject(c).String(), func() *consistencyResult {
		result := &consistencyResult{Time: now(), Revision: revision}
		hashes := map[string]membership.KeyspaceHash{}
		var failed []string
		for name, url := range urls {
			cfg := cfg
			cfg.Endpoints = []string{url}
			digest, err := hashAt(r.Etcd, cfg, url, revision)
			if err != nil {
				failed = append(failed, name+": "+err.Error())
				continue
			}
			hashes[name] = membership.KeyspaceHash{Hash: digest.Hash, CompactRevision: digest.CompactRevision}
		}
		result.Consistency = membership.CompareHashes(hashes, voters)
		if len(failed) > 0 {
			slices.Sort(failed)
			result.Message += "; not compared: " + strings.Join(failed, "; ")
		}
		return result
	})
}

func hashAt(cache *etcd.Cache, cfg etcd.Config, url string, revision int64) (etcd.KeyspaceDigest, error) {
	cl, err := cache.Dial(cfg)
	if err != nil {
		return etcd.KeyspaceDigest{}, err
	}
	defer cl.Close()
	return cl.KeyspaceAt(context.Background(), url, revision)
}

// noMajorityAgrees: the last comparison found the members' hashes differ with no majority.
func noMajorityAgrees(c *etcdv1alpha1.EtcdCluster) bool {
	last := c.Status.LastConsistencyCheck
	return last != nil && last.Result == etcdv1alpha1.ConsistencyInconclusive && strings.HasPrefix(last.Message, "no majority")
}
