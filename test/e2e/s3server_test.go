//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Images the local cluster's registry holds (hack/cluster.mk builds both; make test-e2e passes
// the tags it built).
var (
	s3Image      = envOr("E2E_S3_IMAGE", "127.0.0.1:5000/versitygw:v1.8.0")
	busyboxImage = envOr("E2E_BUSYBOX_IMAGE", "127.0.0.1:5000/busybox:1.35")
)

const (
	s3ServerName = "s3"
	s3Port       = 7070
	s3HealthPath = "/health"
	s3Region     = "us-east-1"
	// The server's root user, which the backup agent also signs in as.
	s3AccessKey = "e2e-access-key"
	s3SecretKey = "e2e-secret-key"
	s3Timeout   = 30 * time.Second
)

// s3Server is a real S3-compatible server (versitygw) running in the cluster as a one-replica
// Deployment behind a ClusterIP Service: the object store the EtcdBackup and EtcdRestore tests
// write to and read from. Its buckets are directories on a PersistentVolumeClaim, so objects
// survive stop and start.
type s3Server struct {
	Namespace string
	Service   string
	// Endpoint is what pods use: the Service's DNS name.
	Endpoint string
	// HostEndpoint is the Service's cluster IP, which the test process reaches because
	// kube-proxy runs on this host; the host cannot resolve cluster DNS names.
	HostEndpoint string
	// CredentialsSecret holds AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the root user's
	// credentials, as spec.destination.s3.credentialsSecretName expects them.
	CredentialsSecret string

	client *s3.Client
}

// startS3Server runs the server in namespace and returns once it answers from the host.
func startS3Server(t testing.TB, namespace string) *s3Server {
	t.Helper()
	ctx := context.Background()
	s := &s3Server{
		Namespace:         namespace,
		Service:           s3ServerName,
		Endpoint:          fmt.Sprintf("http://%s.%s.svc:%d", s3ServerName, namespace, s3Port),
		CredentialsSecret: s3ServerName + "-credentials",
	}
	labels := map[string]string{"app.kubernetes.io/name": "versitygw", "app.kubernetes.io/instance": s3ServerName}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.CredentialsSecret, Namespace: namespace},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3AccessKey, "AWS_SECRET_ACCESS_KEY": s3SecretKey},
	}
	data := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: s3ServerName + "-data", Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: s3ServerName, Namespace: namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// The old pod must be gone before a new one opens the same directories.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       s3ServerPodSpec(s.CredentialsSecret, data.Name),
			},
		},
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Service, Namespace: namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "s3", Port: s3Port, TargetPort: intstr.FromString("s3")}},
		},
	}
	for _, obj := range []client.Object{secret, data, deployment, service} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.logState(t)
		}
	})
	s.HostEndpoint = fmt.Sprintf("http://%s:%d", service.Spec.ClusterIP, s3Port)
	s.client = newS3Client(s.HostEndpoint)
	s.waitServing(t)
	return s
}

func s3ServerPodSpec(credentialsSecret, claim string) corev1.PodSpec {
	fromSecret := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: credentialsSecret}, Key: key,
		}}
	}
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptrTo(false),
		// A Service named s3 would otherwise put S3_* variables into the server's environment.
		EnableServiceLinks: ptrTo(false),
		// The server shuts down gracefully on SIGTERM; a stop must not wait long for an
		// upload in flight.
		TerminationGracePeriodSeconds: ptrTo(int64(5)),
		SecurityContext:               restrictedPodSecurityContext(),
		Containers: []corev1.Container{{
			Name:            "versitygw",
			Image:           s3Image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Args:            []string{"--port", fmt.Sprintf(":%d", s3Port), "--health", s3HealthPath, "posix", "/data"},
			Env: []corev1.EnvVar{
				{Name: "ROOT_ACCESS_KEY_ID", ValueFrom: fromSecret("AWS_ACCESS_KEY_ID")},
				{Name: "ROOT_SECRET_ACCESS_KEY", ValueFrom: fromSecret("AWS_SECRET_ACCESS_KEY")},
			},
			Ports: []corev1.ContainerPort{{Name: "s3", ContainerPort: s3Port}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: s3HealthPath, Port: intstr.FromString("s3")}},
				PeriodSeconds: 1,
			},
			VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			SecurityContext: restrictedContainerSecurityContext(),
			// Requests and limits, so that a namespace whose ResourceQuota demands them admits it.
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			},
		}},
		Volumes: []corev1.Volume{{
			Name:         "data",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}},
		}},
	}
}

// What the restricted Pod Security profile requires, as the nonroot user of the images
// hack/cluster.mk builds.
func restrictedPodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptrTo(true),
		RunAsUser:      ptrTo(int64(65532)),
		RunAsGroup:     ptrTo(int64(65532)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func restrictedContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// newS3Client signs requests for endpoint as the root user, addressing buckets by path as
// self-hosted servers need.
func newS3Client(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       s3Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s3AccessKey, s3SecretKey, ""),
		HTTPClient:   &http.Client{Timeout: s3Timeout},
		// Only what an operation requires: a presigned URL must not depend on headers that
		// a plain HTTP client does not send.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// stop scales the server to zero and returns once its pod is gone; the bucket directories stay
// on the claim. Meanwhile the Service has no endpoints, so connections to it are refused.
func (s *s3Server) stop(t *testing.T) {
	t.Helper()
	s.scale(t, 0)
	waitFor(t, "S3 server pod gone", func(ctx context.Context) (bool, error) {
		pods, err := s.pods(ctx)
		return len(pods) == 0, err
	})
}

// kill stops the server at once: its processes are sent SIGKILL on this machine (the cluster's
// only node), then it is scaled to no replica and its pod deleted without a grace period. A
// pod deletion alone gives the server a SIGTERM, on which it finishes the requests under way:
// an upload it should cut off completed under load.
func (s *s3Server) kill(t *testing.T) {
	t.Helper()
	pods, err := s.pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		killProcessesOfPod(t, &pods[i])
	}
	s.scale(t, 0)
	for i := range pods {
		if err := k8sClient.Delete(context.Background(), &pods[i], client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	s.stop(t)
}

// uploadUnderWay says whether the server lists a multipart upload under prefix: an upload has
// begun and not completed.
func (s *s3Server) uploadUnderWay(ctx context.Context, bucket, prefix string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	return err == nil && len(out.Uploads) > 0
}

// start scales a stopped server back to one replica and returns once it answers from the host.
func (s *s3Server) start(t *testing.T) {
	t.Helper()
	s.scale(t, 1)
	s.waitServing(t)
}

func (s *s3Server) scale(t *testing.T, replicas int32) {
	t.Helper()
	deployment := &appsv1.Deployment{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: s3ServerName}, deployment); err != nil {
		t.Fatal(err)
	}
	before := deployment.DeepCopy()
	deployment.Spec.Replicas = &replicas
	if err := k8sClient.Patch(context.Background(), deployment, client.MergeFrom(before)); err != nil {
		t.Fatalf("scale the S3 server to %d: %v", replicas, err)
	}
}

// waitServing waits for the Deployment to be rolled out and then for the host to reach the
// server through the Service, which kube-proxy routes only once the pod is an endpoint.
func (s *s3Server) waitServing(t testing.TB) {
	t.Helper()
	deployment := &appsv1.Deployment{}
	waitFor(t, "S3 server Deployment available", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s3ServerName}, deployment); err != nil {
			return false, err
		}
		return rolledOut(deployment), nil
	})
	health := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, "S3 server answering at "+s.HostEndpoint, func(context.Context) (bool, error) {
		resp, err := health.Get(s.HostEndpoint + s3HealthPath)
		if err != nil {
			return false, nil //nolint:nilerr // not answering yet is what this waits out
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (s *s3Server) createBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s3Timeout)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

func (s *s3Server) putObject(t *testing.T, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s3Timeout)
	defer cancel()
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// listSnapshots returns the keys of the snapshots under prefix, in the server's (lexical)
// order: the objects but the series' watermarks (watermark.json) the backups keep beside them.
func (s *s3Server) listSnapshots(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	return slices.DeleteFunc(s.listObjects(t, bucket, prefix), func(key string) bool { return path.Base(key) == "watermark.json" })
}

// listObjects returns the keys under prefix, in the server's (lexical) order.
func (s *s3Server) listObjects(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s3Timeout)
	defer cancel()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatalf("list s3://%s/%s: %v", bucket, prefix, err)
		}
		for _, object := range page.Contents {
			keys = append(keys, aws.ToString(object.Key))
		}
	}
	return keys
}

func (s *s3Server) getObject(t *testing.T, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s3Timeout)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return body
}

func (s *s3Server) pods(ctx context.Context) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	err := k8sClient.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": s3ServerName})
	return pods.Items, err
}

// logState says what became of the server's pods, for a test that failed.
func (s *s3Server) logState(t testing.TB) {
	ctx := context.Background()
	pods, err := s.pods(ctx)
	if err != nil {
		t.Logf("S3 server pods: %v", err)
		return
	}
	for _, pod := range pods {
		t.Logf("S3 server pod %s: phase %s, conditions %+v, containers %+v", pod.Name, pod.Status.Phase, pod.Status.Conditions, pod.Status.ContainerStatuses)
		t.Logf("S3 server pod %s log, less its health probes:\n%s", pod.Name, withoutHealthProbes(podLog(s.Namespace, pod.Name)))
	}
}

// withoutHealthProbes drops the kubelet's probe requests, a line a second, from a server log:
// kept, they push the requests that matter out of what CI shows of a failure.
func withoutHealthProbes(log string) string {
	var kept []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, " "+s3HealthPath+" ") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// getObjectFromPod fetches an object as a workload in the namespace does: from a pod, through
// the Service's DNS name. The request is a presigned URL, so the pod needs no S3 client.
func (s *s3Server) getObjectFromPod(t *testing.T, bucket, key string) []byte {
	t.Helper()
	ctx := context.Background()
	presigned, err := s3.NewPresignClient(newS3Client(s.Endpoint)).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}, s3.WithPresignExpires(5*time.Minute))
	if err != nil {
		t.Fatalf("presign s3://%s/%s: %v", bucket, key, err)
	}
	// Not wget's -T: busybox 1.35's wget crashes with it.
	return []byte(runPod(t, s.Namespace, "s3-get-", "", "wget", "-q", "-O", "-", presigned.URL))
}

// The fixture itself: the server answers the S3 API from the host and, by its DNS name, from
// pods, and keeps its objects across stop and start.
func TestS3ServerInClusterServesObjects(t *testing.T) {
	ns := testNamespace(t, "e2e-s3-")
	s := startS3Server(t, ns)

	const bucket, key = "backups", "e2e/hello.txt"
	content := []byte("written from the host at " + time.Now().UTC().Format(time.RFC3339Nano))
	s.createBucket(t, bucket)
	s.putObject(t, bucket, key, content)
	s.putObject(t, bucket, "elsewhere/other.txt", []byte("not under the prefix"))

	if keys := s.listObjects(t, bucket, "e2e/"); !slices.Equal(keys, []string{key}) {
		t.Fatalf("keys under e2e/: %q, want [%q]", keys, key)
	}
	if got := s.getObject(t, bucket, key); !bytes.Equal(got, content) {
		t.Fatalf("got %q from the host, want %q", got, content)
	}
	if got := s.getObjectFromPod(t, bucket, key); !bytes.Equal(got, content) {
		t.Fatalf("got %q from a pod through %s, want %q", got, s.Endpoint, content)
	}

	s.stop(t)
	if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(s.HostEndpoint + s3HealthPath); err == nil {
		resp.Body.Close()
		t.Fatalf("%s still answers with the server stopped", s.HostEndpoint)
	}
	s.start(t)
	if got := s.getObject(t, bucket, key); !bytes.Equal(got, content) {
		t.Fatalf("after stop and start got %q, want %q", got, content)
	}
}
