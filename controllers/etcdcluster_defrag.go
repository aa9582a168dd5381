package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// defragmentations run in the background. Defragmenting rewrites a member's whole database
// file and can take minutes; a reconcile worker held that long would hold up every other
// cluster queued behind it. At most one runs per cluster: the reconciles that find it running
// wait (membership.Observed.Defragmenting), and it posts its own event when it ends.
type defragmentations struct {
	mu      sync.Mutex
	running map[string]string // member being defragmented, by cluster key
}

// member is the member of the cluster being defragmented, or "".
func (d *defragmentations) member(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running[key]
}

// start runs defragment for member unless a defragmentation of the cluster is running.
func (d *defragmentations) start(key, member string, defragment func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running == nil {
		d.running = map[string]string{}
	}
	if _, busy := d.running[key]; busy {
		return
	}
	d.running[key] = member
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.running, key)
			d.mu.Unlock()
		}()
		defragment()
	}()
}

// defragmentInBackground starts the Defragment step on a connection of its own to the member,
// which the cluster's shared client, replaced when members or credentials change, cannot cut.
func (r *EtcdClusterReconciler) defragmentInBackground(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) {
	url := resources.ClientURL(c, step.Member)
	cfg := obs.access.config([]string{url}, obs.rootPassword)
	cluster := c.DeepCopy() // for the event; the reconcile goes on with c
	r.defrags.start(client.ObjectKeyFromObject(c).String(), step.Member, func() {
		started := time.Now()
		cl, err := r.Etcd.Dial(cfg)
		if err == nil {
			err = cl.Defragment(context.Background(), url)
			_ = cl.Close()
		}
		if err != nil {
			postEvent(r.Recorder, cluster, corev1.EventTypeWarning, "StepFailed", string(membership.Defragment), "%s %s: %v", membership.Defragment, step.Member, err)
			return
		}
		postEvent(r.Recorder, cluster, corev1.EventTypeNormal, etcdv1alpha1.ReasonDefragmenting, string(membership.Defragment),
			"defragmented %s in %s", step.Member, time.Since(started).Round(time.Second))
	})
}
