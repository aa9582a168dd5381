//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Drains go through the Eviction API, which honours the PodDisruptionBudget. Every member pod
// is evicted again and again — while a backup Job's pod runs beside the members, while a
// 5 -> 3 scale-down is in progress, and while the operator rolls a changed spec out — and at no
// moment may fewer than a quorum of etcd's voters be running and Ready. An agent pod counted as
// a member, a budget computed from spec.size rather than the voters etcd has, or a roll-out that
// deletes a member's pod rather than evicting it through the same budget, would let two of three
// members go at once.
func TestDrainsNeverBreakQuorum(t *testing.T) {
	inParallel(t, 240*time.Second)
	ctx := context.Background()
	ns := testNamespace(t, "e2e-drain-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "drain", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	w := startWriter(t, clientServiceEndpoint(t, c), "/e2e/drain")

	t.Run("a running backup Job is not a member", func(t *testing.T) {
		agent := startStuckBackup(t, c)
		members := memberPods(t, c)
		if len(members) != 3 {
			t.Fatalf("%d pods carry the cluster's label, want its 3 members only", len(members))
		}
		waitFor(t, "the client Service's endpoints to list exactly the member pods", func(ctx context.Context) (bool, error) {
			ips, err := clientServiceEndpointIPs(ctx, c)
			if err != nil {
				return false, err
			}
			var want []string
			for _, p := range members {
				want = append(want, p.Status.PodIP)
			}
			slices.Sort(want)
			if slices.Contains(ips, agent.Status.PodIP) {
				return false, fmt.Errorf("the agent pod %s (%s) is an endpoint of the client Service: %v", agent.Name, agent.Status.PodIP, ips)
			}
			return slices.Equal(ips, want), nil
		})
		waitFor(t, "the budget to count exactly the healthy members", func(ctx context.Context) (bool, error) {
			pdb := &policyv1.PodDisruptionBudget{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), pdb); err != nil {
				return false, err
			}
			s := pdb.Status
			if s.ExpectedPods > 3 || s.CurrentHealthy > 3 {
				return false, fmt.Errorf("the budget counts the agent pod as a member: %+v", s)
			}
			return s.ExpectedPods == 3 && s.CurrentHealthy == 3 && s.DisruptionsAllowed == 1, nil
		})
		evictUntil(t, c, 45*time.Second)
	})

	t.Run("scale 3 to 5", func(t *testing.T) { scaleTo(t, c, 5) })

	t.Run("evictions during a 5 to 3 scale-down", func(t *testing.T) {
		patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 3 })
		evictUntil(t, c, 60*time.Second)
		waitAvailable(t, c, 3)
	})

	t.Run("evictions during a roll-out", func(t *testing.T) {
		patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) {
			c.Spec.PodTemplate.Metadata.Annotations = map[string]string{"example.com/rolled": "yes"}
		})
		evictUntil(t, c, 60*time.Second)
		waitFor(t, "every member restarted on the changed spec", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
				return false, err
			}
			for _, pod := range memberPods(t, c) {
				if pod.Annotations["example.com/rolled"] != "yes" {
					return false, nil
				}
			}
			return isAvailable(c, 3), nil
		})
	})

	t.Run("no acknowledged write lost", func(t *testing.T) { w.verify(t) })
}

// evictUntil evicts every member pod of c through the Eviction API, again and again for the
// duration, while a watcher checks that a quorum of etcd's voters stays running and Ready. The
// budget must both allow evictions (else the test proves nothing) and refuse some.
func evictUntil(t *testing.T, c *etcdv1alpha1.EtcdCluster, duration time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	violations := watchQuorum(ctx, t, c)

	evicted, refused := 0, 0
	for ctx.Err() == nil {
		for _, pod := range memberPods(t, c) {
			if !pod.DeletionTimestamp.IsZero() {
				continue
			}
			eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
			err := k8sClient.SubResource("eviction").Create(context.Background(), &pod, eviction)
			switch {
			case err == nil:
				evicted++
				t.Logf("evicted %s", pod.Name)
			case apierrors.IsTooManyRequests(err):
				refused++
			case apierrors.IsNotFound(err):
			default:
				t.Fatalf("evict %s: %v", pod.Name, err)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	cancel()
	t.Logf("%d evictions allowed, %d refused by the budget", evicted, refused)
	if v := <-violations; v != "" {
		t.Fatal(v)
	}
	if evicted == 0 || refused == 0 {
		t.Fatalf("%d evictions allowed and %d refused: the drain did not exercise the budget", evicted, refused)
	}
}

// watchQuorum samples, until ctx ends, etcd's voters (through the client Service) and the
// member pods, and reports the first sample in which fewer than a quorum of the voters had a
// running, Ready pod ("" if none).
//
// Without a quorum etcd answers no member list: the call times out. A sample whose list fails
// is therefore kept, not skipped (skipped, the very state the watch is for would never be
// judged), and judged once a list answers again, against the voters listed both before and
// after it: a member in only one of the two was removed or added meanwhile, and may not have
// been a voter when the pods were sampled. Lists that still fail when the watch ends are asked
// once more; one that never answers again is a quorum that did not come back.
func watchQuorum(ctx context.Context, t *testing.T, c *etcdv1alpha1.EtcdCluster) <-chan string {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{clientServiceEndpoint(t, c)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	var once sync.Once
	go func() {
		defer cl.Close()
		violation := ""
		defer func() { once.Do(func() { out <- violation }) }()
		var listed []string      // the voters of the last list etcd answered; nil before the first
		var unlisted []podSample // samples taken since, whose lists failed
		judgeUnlisted := func(voters []string) string {
			if listed != nil {
				voters = slices.DeleteFunc(slices.Clone(voters), func(name string) bool { return !slices.Contains(listed, name) })
			}
			if len(voters) == 0 {
				// No member was a voter on both sides of the gap: nothing to judge against.
				unlisted = nil
				return ""
			}
			for _, s := range unlisted {
				if v := s.quorumBroken(voters); v != "" {
					return v + ", while etcd answered no member list"
				}
			}
			unlisted = nil
			return ""
		}
		for samples := 0; ctx.Err() == nil; samples++ {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			list, listErr := cl.MemberList(callCtx)
			cancel()
			if listErr != nil && ctx.Err() != nil {
				break // the watch ended during the call: no sample
			}
			ready, err := readyMemberPods(c)
			if err != nil {
				violation = err.Error()
				return
			}
			sample := podSample{n: samples, ready: ready}
			if listErr != nil {
				if !errors.Is(listErr, context.DeadlineExceeded) {
					t.Logf("member list: %v", listErr)
				}
				unlisted = append(unlisted, sample)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			voters := votersOf(list)
			if violation = judgeUnlisted(voters); violation != "" {
				return
			}
			if violation = sample.quorumBroken(voters); violation != "" {
				return
			}
			listed = voters
			time.Sleep(200 * time.Millisecond)
		}
		if len(unlisted) == 0 {
			return
		}
		callCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := cl.MemberList(callCtx)
		if err != nil {
			violation = fmt.Sprintf("etcd answered no member list from sample %d to the end of the watch, nor 30s after: %v", unlisted[0].n, err)
			return
		}
		violation = judgeUnlisted(votersOf(list))
	}()
	return out
}

// podSample is which member pods ran and were Ready, by name, at one sample of watchQuorum.
type podSample struct {
	n     int
	ready map[string]bool
}

// quorumBroken says how the sample broke quorum, if fewer than a quorum of voters had a running,
// Ready pod; "" otherwise.
func (s podSample) quorumBroken(voters []string) string {
	up := 0
	for _, name := range voters {
		if s.ready[name] {
			up++
		}
	}
	if up < len(voters)/2+1 {
		return fmt.Sprintf("quorum broken: %d of %d voters %v have a running, Ready pod (sample %d)", up, len(voters), voters, s.n)
	}
	return ""
}

// readyMemberPods says, for each pod carrying the cluster's label, whether it runs and is Ready.
func readyMemberPods(c *etcdv1alpha1.EtcdCluster) (map[string]bool, error) {
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		ready[p.Name] = p.DeletionTimestamp.IsZero() && podReady(p)
	}
	return ready, nil
}

// votersOf names the voting members of a member list.
func votersOf(list *clientv3.MemberListResponse) []string {
	var voters []string
	for _, m := range list.Members {
		if !m.IsLearner {
			voters = append(voters, m.Name)
		}
	}
	return voters
}

// startStuckBackup starts a one-shot backup of c to an S3 endpoint that accepts connections and
// never answers, so its agent pod runs (and is Ready) for as long as the test needs, and returns
// that pod once it runs.
func startStuckBackup(t *testing.T, c *etcdv1alpha1.EtcdCluster) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	silent := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "silent-s3", Namespace: c.Namespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			SecurityContext:               restrictedPodSecurityContext(),
			Containers: []corev1.Container{{
				Name: "silent", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", "while true; do sleep 3600 | nc -l -p 9000; done"},
				SecurityContext: restrictedContainerSecurityContext(),
			}},
		},
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "silent-s3-credentials", Namespace: c.Namespace},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
	}
	for _, obj := range []client.Object{silent, secret} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the silent S3 endpoint running", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(silent), silent)
		return err == nil && podReady(silent), err
	})
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: c.Namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: c.Name, Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: "backups", Endpoint: fmt.Sprintf("http://%s:9000", silent.Status.PodIP), ForcePathStyle: true, AllowPlainHTTP: true,
			CredentialsSecretName: secret.Name,
		}}},
	}
	if err := k8sClient.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	agent := &corev1.Pod{}
	waitFor(t, "the backup's agent pod running and Ready", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := k8sClient.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelBackup: backup.Name}); err != nil {
			return false, err
		}
		for i := range pods.Items {
			if _, isJob := pods.Items[i].Labels[batchv1.JobNameLabel]; isJob && podReady(&pods.Items[i]) {
				*agent = pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return agent
}

// clientServiceEndpointIPs are the addresses the client Service's EndpointSlices list, ready or
// not, sorted.
func clientServiceEndpointIPs(ctx context.Context, c *etcdv1alpha1.EtcdCluster) ([]string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := k8sClient.List(ctx, list, client.InNamespace(c.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: resources.ClientServiceName(c.Name)}); err != nil {
		return nil, err
	}
	var ips []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			ips = append(ips, e.Addresses...)
		}
	}
	slices.Sort(ips)
	return ips, nil
}
