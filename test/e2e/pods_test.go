//go:build e2e

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runPod runs command in a short-lived busybox pod of the namespace, under the restricted
// profile, with the claim (if any) mounted read-only at /claim, and returns its output; the
// test fails if the command does.
func runPod(t *testing.T, namespace, prefix, claim string, command ...string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptrTo(int64(60)),
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			SecurityContext:               restrictedPodSecurityContext(),
			Containers: []corev1.Container{{
				Name:            "run",
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         command,
				SecurityContext: restrictedContainerSecurityContext(),
			}},
		},
	}
	if claim != "" {
		pod.Spec.Volumes = []corev1.Volume{{Name: "claim", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
		}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "claim", MountPath: "/claim", ReadOnly: true}}
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+pod.Name+" finished", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	log := podLog(namespace, pod.Name)
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("%v in pod %s failed: %+v\n%s", command, pod.Name, pod.Status.ContainerStatuses, log)
	}
	if err := k8sClient.Delete(ctx, pod); err != nil {
		t.Errorf("delete pod %s: %v", pod.Name, err)
	}
	return log
}

// createClaim makes a 1Gi claim on the cluster's default storage class, or on the class named
// by storageClass.
func createClaim(t *testing.T, namespace, name string, storageClass ...string) *corev1.PersistentVolumeClaim {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if len(storageClass) > 0 {
		claim.Spec.StorageClassName = &storageClass[0]
	}
	if err := k8sClient.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	return claim
}
