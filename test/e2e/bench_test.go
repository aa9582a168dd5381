//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Benchmarks of the operator against the plainest alternative: a 3-replica StatefulSet of the
// same etcd image, measured side by side on the same cluster (`make bench-e2e`). They report
// seconds and the ratio as custom metrics; docs/performance.md records the figures.

const benchImage = "127.0.0.1:5000/etcd:v" + etcdVersion

// BenchmarkTimeToAvailable: an EtcdCluster of 3 until Available with 3 healthy voters, against
// a StatefulSet of 3 until 3 pods are Ready.
func BenchmarkTimeToAvailable(b *testing.B) {
	var op, sts time.Duration
	for i := 0; i < b.N; i++ {
		ns := benchNamespace(b)
		start := time.Now()
		c := benchCluster(b, ns, fmt.Sprintf("bench%d", i))
		waitAvailableB(b, c, 3)
		op += time.Since(start)

		start = time.Now()
		s := benchStatefulSet(b, ns, fmt.Sprintf("sts%d", i))
		waitStatefulSetReady(b, s, 3)
		sts += time.Since(start)
	}
	report(b, "operator-s", op, "statefulset-s", sts)
}

// BenchmarkMemberPodKilled: a member pod deleted until the cluster is fully healthy again,
// against a StatefulSet pod deleted until the StatefulSet has 3 Ready pods again.
func BenchmarkMemberPodKilled(b *testing.B) {
	ns := benchNamespace(b)
	c := benchCluster(b, ns, "killed")
	waitAvailableB(b, c, 3)
	s := benchStatefulSet(b, ns, "stskilled")
	waitStatefulSetReady(b, s, 3)
	ctx := context.Background()

	var op, sts time.Duration
	for i := 0; i < b.N; i++ {
		pods := &corev1.PodList{}
		if err := k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"etcd.database.dev/cluster": c.Name}); err != nil {
			b.Fatal(err)
		}
		victim := pods.Items[i%len(pods.Items)]
		start := time.Now()
		if err := k8sClient.Delete(ctx, &victim, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		waitRecreatedReady(b, &victim)
		waitAvailableB(b, c, 3)
		op += time.Since(start)

		stsPod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", s.Name, i%3)}, stsPod); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := k8sClient.Delete(ctx, stsPod, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		waitRecreatedReady(b, stsPod)
		waitStatefulSetReady(b, s, 3)
		sts += time.Since(start)
	}
	report(b, "operator-s", op, "statefulset-s", sts)
}

// BenchmarkIdleClusterWrites: a healthy cluster left alone; every change of its resourceVersion
// is a write by the operator (nothing else touches it).
func BenchmarkIdleClusterWrites(b *testing.B) {
	ns := benchNamespace(b)
	c := benchCluster(b, ns, "idle")
	waitAvailableB(b, c, 3)
	window := envDuration("BENCH_IDLE_WINDOW", 5*time.Minute)
	writes := 0
	for i := 0; i < b.N; i++ {
		last := c.ResourceVersion
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) {
			time.Sleep(time.Second)
			if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
				b.Fatal(err)
			}
			if c.ResourceVersion != last {
				writes++
				last = c.ResourceVersion
			}
		}
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/idle-window")
	b.ReportMetric(window.Seconds(), "window-s")
}

func report(b *testing.B, opName string, op time.Duration, baseName string, base time.Duration) {
	n := float64(b.N)
	b.ReportMetric(op.Seconds()/n, opName)
	b.ReportMetric(base.Seconds()/n, baseName)
	b.ReportMetric(op.Seconds()/base.Seconds(), "ratio")
}

func benchNamespace(b *testing.B) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

func benchCluster(b *testing.B, ns, name string) *etcdv1alpha1.EtcdCluster {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))}},
	}
	if err := k8sClient.Create(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	return c
}

// benchStatefulSet is the textbook etcd StatefulSet: static bootstrap of all three members in
// parallel, a claim each, the same image, probes and restricted security context.
func benchStatefulSet(b *testing.B, ns, name string) *appsv1.StatefulSet {
	ctx := context.Background()
	labels := map[string]string{"bench": name}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "peer", Port: 2380}, {Name: "client", Port: 2379}}},
	}
	if err := k8sClient.Create(ctx, svc); err != nil {
		b.Fatal(err)
	}
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("%s-%d=http://%s-%d.%s.%s.svc:2380", name, i, name, i, name, ns))
	}
	peer := fmt.Sprintf("http://$(POD_NAME).%s.%s.svc", name, ns)
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(2381)}}, PeriodSeconds: 2}
	}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo[int32](3), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo[int64](65532), FSGroup: ptrTo[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "etcd", Image: benchImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/usr/local/bin/etcd"},
						Args: []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
							"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
							"--listen-metrics-urls=http://0.0.0.0:2381",
							"--advertise-client-urls=" + peer + ":2379", "--initial-advertise-peer-urls=" + peer + ":2380",
							"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
							"--initial-cluster-token=" + name},
						Env:            []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						ReadinessProbe: probe("/readyz"),
						VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("256Mi")}}},
			}},
		},
	}
	if err := k8sClient.Create(ctx, s); err != nil {
		b.Fatal(err)
	}
	return s
}

func waitAvailableB(b *testing.B, c *etcdv1alpha1.EtcdCluster, size int) {
	poll(b, "cluster "+c.Name+" Available", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		return isAvailable(c, size), nil
	})
}

func waitStatefulSetReady(b *testing.B, s *appsv1.StatefulSet, n int32) {
	poll(b, "StatefulSet "+s.Name+" ready", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		return s.Status.ReadyReplicas == n && s.Status.ObservedGeneration == s.Generation, nil
	})
}

func waitRecreatedReady(b *testing.B, old *corev1.Pod) {
	poll(b, "pod "+old.Name+" recreated and Ready", func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(old), p)
		return err == nil && p.UID != old.UID && podReady(p), ignoreNotFound(err)
	})
}

// poll checks every 100 ms — fine enough for figures of seconds — for at most 5 minutes.
func poll(b *testing.B, what string, done func(context.Context) (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		ok, err := done(context.Background())
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("%s: not within 5 minutes", what)
}

func envDuration(name string, fallback time.Duration) time.Duration {
	if d, err := time.ParseDuration(envOr(name, "")); err == nil {
		return d
	}
	return fallback
}
