package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A person's leave for a quorum-loss recovery is an annotation on the EtcdCluster: recover-from
// names the survivor, lost-members the members whose machines they checked are down. Each holds
// for the loss it was given for, and only that one: a leave left over from an earlier loss, or
// given before this loss was observed, says nothing of the members as they are now, and
// following it could force a survivor beside a majority that still serves.
var leaveAnnotations = []string{etcdv1alpha1.AnnotationRecoverFrom, etcdv1alpha1.AnnotationLostMembers}

// declaredLost are the members the lost-members annotation names.
func declaredLost(c *etcdv1alpha1.EtcdCluster) []string {
	var out []string
	for name := range strings.SplitSeq(c.Annotations[etcdv1alpha1.AnnotationLostMembers], ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// staleLeaves says, for each leave annotation on c that no longer holds, why: the cluster has a
// quorum (and no recovery is under way to use it), or the annotation was set before the
// operator first found this quorum lost: it is there when the loss is first observed, or (for
// a loss an earlier operator version recorded) the API server's managed fields date it before.
func staleLeaves(c *etcdv1alpha1.EtcdCluster, reachable bool) map[string]string {
	out := map[string]string{}
	lostAt, lost := quorumLostSince(c)
	for _, key := range leaveAnnotations {
		if _, ok := c.Annotations[key]; !ok {
			continue
		}
		switch setAt, known := annotationSetAt(c, key); {
		case reachable && underwayRecovery(c) == nil:
			out[key] = "the cluster has a quorum: " + key + " is a leave for recovering a lost one, and a later loss must not be recovered on it"
		case !reachable && !lost && c.Status.ClusterID != "":
			// The loss is observed now: a leave already there was given before it, whatever the
			// managed fields say (a field manager's time is that of its last write of any field).
			out[key] = key + " was set before this quorum loss was observed: it says nothing of the members as they are now; set it again if it still holds"
		case lost && known && setAt.Before(lostAt):
			out[key] = fmt.Sprintf("%s was set at %s, before the quorum loss was observed at %s: it says nothing of the members as they are now; set it again if it still holds",
				key, setAt.UTC().Format(time.RFC3339), lostAt.UTC().Format(time.RFC3339))
		}
	}
	return out
}

// annotationSetAt is when the annotation key was last set, as the API server's managed fields
// record it: the time of the last write of the field manager that owns it.
func annotationSetAt(c *etcdv1alpha1.EtcdCluster, key string) (time.Time, bool) {
	var latest time.Time
	for _, entry := range c.ManagedFields {
		if entry.FieldsV1 == nil || entry.Time == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(entry.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, owns := fields.Metadata.Annotations["f:"+key]; owns && entry.Time.After(latest) {
			latest = entry.Time.Time
		}
	}
	return latest, !latest.IsZero()
}

// dropStaleLeaves removes the leave annotations that no longer hold (staleLeaves), each with a
// Warning event saying why, before anything is decided on them.
func (r *EtcdClusterReconciler) dropStaleLeaves(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	stale := staleLeaves(c, obs.reachable)
	if len(stale) == 0 {
		return nil
	}
	changed := c.DeepCopy()
	for key := range stale {
		delete(changed.Annotations, key)
	}
	if err := r.Patch(ctx, changed, client.MergeFrom(c)); err != nil {
		return fmt.Errorf("remove the annotations %v that no longer hold: %w", keysOf(stale), err)
	}
	c.Annotations, c.ResourceVersion = changed.Annotations, changed.ResourceVersion
	for _, key := range keysOf(stale) {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, "AnnotationIgnored", "Recover", "removed %s: %s", key, stale[key])
	}
	return nil
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
