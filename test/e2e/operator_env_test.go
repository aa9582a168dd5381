//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// setOperatorEnv sets env on the operator's manager container, as OLM sets a Subscription's
// (its proxy variables among them), and returns the pod the Deployment rolled out with it,
// ready. The operator reads its environment only when it starts, hence the new pod. The test's
// cleanup takes the variables off again and waits for the pod without them, so that the tests
// after it find the operator as deployed.
func setOperatorEnv(t testing.TB, env ...corev1.EnvVar) *corev1.Pod {
	t.Helper()
	deployment := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}
	if err := k8sClient.Get(context.Background(), key, deployment); err != nil {
		t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(deployment.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(env))
	set := make([]map[string]string, 0, len(env))
	unset := make([]map[string]string, 0, len(env))
	for _, e := range env {
		names = append(names, e.Name)
		set = append(set, map[string]string{"name": e.Name, "value": e.Value})
		unset = append(unset, map[string]string{"name": e.Name, "$patch": "delete"})
	}
	patchManagerEnv(t, deployment, set)
	t.Cleanup(func() {
		patchManagerEnv(t, deployment, unset)
		waitOperatorRolledOut(t, deployment, selector, func(pod *corev1.Pod) bool {
			return !slices.ContainsFunc(names, func(name string) bool { return hasEnv(pod, name) })
		})
	})
	return waitOperatorRolledOut(t, deployment, selector, func(pod *corev1.Pod) bool {
		return !slices.ContainsFunc(names, func(name string) bool { return !hasEnv(pod, name) })
	})
}

// patchManagerEnv changes the manager's env by a strategic merge patch: entries merge by name,
// and one with "$patch": "delete" is taken out.
func patchManagerEnv(t testing.TB, deployment *appsv1.Deployment, env []map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]any{{"name": managerContainer, "env": env}},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Patch(context.Background(), deployment, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		t.Fatalf("patch the env of the operator Deployment: %v", err)
	}
}

// waitOperatorRolledOut waits for the Deployment to be rolled out to one ready pod that is
// what wanted says, and returns it.
func waitOperatorRolledOut(t testing.TB, deployment *appsv1.Deployment, selector labels.Selector, wanted func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitForLong(t, "the operator Deployment rolled out with its new environment", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(deployment), deployment); err != nil {
			return false, err
		}
		if !rolledOut(deployment) {
			return false, nil
		}
		pods, err := operatorPods(ctx, selector)
		if err != nil || len(pods) != 1 || !podReady(&pods[0]) || !wanted(&pods[0]) {
			return false, err
		}
		pod = &pods[0]
		return true, nil
	})
	return pod
}

// operatorPods are the operator's pods that are not being deleted.
func operatorPods(ctx context.Context, selector labels.Selector) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := k8sClient.List(ctx, list, client.InNamespace(operatorNamespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}

func hasEnv(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == name })
}
