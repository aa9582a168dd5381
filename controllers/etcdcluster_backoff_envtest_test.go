package controllers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// errEtcdUnhealthy is what etcd answers a membership change while a member it counts as
// connected has been so for less than five seconds (its strict reconfiguration check).
var errEtcdUnhealthy = errors.New("etcdserver: unhealthy cluster")

// A step etcd keeps refusing is retried with growing waits, as the operator's manager runs it:
// the status each failure writes (naming it, with the new member's random name for a learner)
// is the operator's own change and sets off no attempt of its own. Stop 35's soak saw a
// refused step retried every 20 to 50 ms for as long as etcd refused it.
// Against a kube-apiserver of its own (envCluster).
func TestARefusedStepIsRetriedWithGrowingWaits(t *testing.T) {
	for _, tc := range []struct {
		name, call string
		cause      func(t *testing.T, f *envCluster)
	}{
		{"a learner added to scale up", "AddLearner", func(t *testing.T, f *envCluster) {
			// A patch, not an update: the manager writes status meanwhile.
			patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":4}}`))
			if err := f.k8s.Patch(t.Context(), f.get(t), patch); err != nil {
				t.Fatal(err)
			}
		}},
		{"a member whose claim is gone removed", "RemoveMember", func(t *testing.T, f *envCluster) {
			// As a lost node's: its claim and its pod go.
			pvc, pod := &corev1.PersistentVolumeClaim{}, &corev1.Pod{}
			pvc.Namespace, pvc.Name = f.cluster.Namespace, resources.PVCName("c-m0002")
			pod.Namespace, pod.Name = f.cluster.Namespace, "c-m0002"
			for _, obj := range []client.Object{pvc, pod} {
				if err := f.k8s.Delete(t.Context(), obj, client.GracePeriodSeconds(0)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newEnvCluster(t, "backoff")
			f.etcd.Fail = map[string]error{tc.call: errEtcdUnhealthy}
			stop := f.runManager(t)
			tc.cause(t, f)
			const window = 4 * time.Second
			time.Sleep(window)
			stop()
			// From the first refusal the waits double from 5 ms: 10 attempts in 4 s, and
			// fewer as the cap nears. A retry set off by each status write is one per round
			// trip to the API server: hundreds.
			if n := f.calls(tc.call); n == 0 || n > 12 {
				t.Errorf("%s attempted %d times in %s with etcd refusing it; want 1 to 12", tc.call, n, window)
			}
		})
	}
}

// runManager runs the reconciler as main.go does, under a manager of its own, until stop; the
// test reads the fake etcd and the recorder only after stop.
func (f *envCluster) runManager(t *testing.T) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(f.cfg, ctrl.Options{
		Scheme: f.k8s.Scheme(), Cache: CacheOptions(nil), Metrics: metricsserver.Options{BindAddress: "0"},
		// The suite's manager has a controller of the same name.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.recorder = events.NewFakeRecorder(100_000)
	f.r.Recorder = f.recorder
	f.r.Client, f.r.APIReader = mgr.GetClient(), mgr.GetAPIReader()
	if err := f.r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// However long etcd refuses a step, the retries stay within requeueSteady of each other: with
// controller-runtime's default they would be sixteen minutes apart after eighteen refusals.
func TestStepRetriesAreNeverMoreThanHalfAMinuteApart(t *testing.T) {
	limiter, req := stepRetryRateLimiter(), reconcile.Request{}
	var waits []time.Duration
	for range 40 {
		waits = append(waits, limiter.When(req))
	}
	if waits[0] > 10*time.Millisecond || waits[1] <= waits[0] {
		t.Errorf("first waits %v: want them to start at a few milliseconds and grow", waits[:2])
	}
	if last := waits[len(waits)-1]; last != requeueSteady {
		t.Errorf("after %d refusals the wait is %s, want %s", len(waits), last, requeueSteady)
	}
}

// A status write refused as a conflict (the reconcile read the cluster from a cache that had
// not yet seen the last status write) is made again within a second, not at the next steady
// requeue: the reconciler's own status writes no longer wake it, so nothing else would, and
// status would show a member down for 30 s after it was back (seen in the soak and in a
// loop of member kills: 1 in 8 took 32 s to be reported whole).
func TestAStatusWriteLostToAConflictIsMadeAgainAtOnce(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	conflicts := 1
	a.r.Client = interceptor.NewClient(a.r.Client.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(schema.GroupResource{Resource: "etcdclusters"}, obj.GetName(), errors.New("the object has been modified"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}
	result, err := a.r.Reconcile(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if result.RequeueAfter == 0 || result.RequeueAfter > time.Second {
		t.Fatalf("after a status write lost to a conflict the reconciler looks again in %s; want within a second", result.RequeueAfter)
	}
	if _, err := a.r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := a.reconcile(t, 0); got.Status.ReadyMembers != 3 {
		t.Errorf("status after the next reconcile: %d ready members, want 3", got.Status.ReadyMembers)
	}
}
