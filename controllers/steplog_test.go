package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
)

// debugLog is a context whose logger keeps the V(1) lines it is given.
func debugLog(t *testing.T) (context.Context, *[]string) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 1})
	return ctrl.LoggerInto(t.Context(), logger), &lines
}

func logged(lines []string, parts ...string) bool {
	for _, line := range lines {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			return true
		}
	}
	return false
}

// The backup and restore reconcilers log each step at V(1) with its action, the object's name
// and the reason, as the cluster reconciler does: kubectl logs tells the story.
func TestBackupAndRestoreLogTheirSteps(t *testing.T) {
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "backup-uid", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "missing",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups",
				Provision: &etcdv1alpha1.ClaimProvision{Size: resource.MustParse("64Mi")}}}},
	}
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "restore-uid", Finalizers: []string{restoreFinalizer}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "none"}},
			Target: etcdv1alpha1.RestoreTarget{ClusterName: "c"},
		},
		// Started past the wait for a source that may yet come (sourceWait): missing is final.
		Status: etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestorePending, StartTime: ptrTime(time.Now().Add(-2 * sourceWait))},
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup, rs).WithStatusSubresource(backup, rs).Build()

	ctx, lines := debugLog(t)
	backups := &EtcdBackupReconciler{Client: k8s, APIReader: k8s, AgentImage: "registry.test/agent", Now: time.Now}
	if _, err := backups.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
		t.Fatal(err)
	}
	if !logged(*lines, `"action"="ProvisionClaim"`, `"backup"="b"`, `"claim"="backups"`) {
		t.Errorf("no step logged for the claim provisioned: %q", *lines)
	}
	if !logged(*lines, `"action"="WaitUntilReady"`, `"backup"="b"`, `"reason"="ClusterNotFound"`) {
		t.Errorf("no step logged for a backup whose cluster is missing: %q", *lines)
	}

	ctx, lines = debugLog(t)
	restores := &EtcdRestoreReconciler{Client: k8s, APIReader: k8s, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}
	if _, err := restores.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err != nil {
		t.Fatal(err)
	}
	if !logged(*lines, `"action"="Failed"`, `"restore"="r"`, `"reason"="SourceNotFound"`) {
		t.Errorf("no step logged for a restore whose source is missing: %q", *lines)
	}
}

// infoLog is a context whose logger keeps the lines logged at info, and not those at debug.
func infoLog(t *testing.T) (context.Context, *[]string) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})
	return ctrl.LoggerInto(t.Context(), logger), &lines
}

// Each step the cluster reconciler takes is logged at info with the cluster and the member, so
// that the default log level tells the story; the waits, at every look, only at debug.
func TestClusterStepsTakenAreLoggedAtInfo(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	r := &EtcdClusterReconciler{Recorder: events.NewFakeRecorder(10)}

	ctx, lines := infoLog(t)
	if _, err := r.act(ctx, c, &observation{}, membership.Step{Action: membership.Wait, Operation: membership.OpNone, Reason: "steady"}); err != nil {
		t.Fatal(err)
	}
	if len(*lines) > 0 {
		t.Errorf("a wait logged at info: %q", *lines)
	}
	step := membership.Step{Action: membership.BeginRecovery, Member: "c-m0001", Operation: membership.OpRecoveringQuorum, Reason: "quorum is lost for good"}
	if _, err := r.act(ctx, c, &observation{}, step); err != nil {
		t.Fatal(err)
	}
	if !logged(*lines, `"step taken"`, `"cluster"="c"`, `"action"="BeginRecovery"`, `"member"="c-m0001"`, `"reason"="quorum is lost for good"`) {
		t.Errorf("the recovery's start not logged at info with cluster and member: %q", *lines)
	}
}
