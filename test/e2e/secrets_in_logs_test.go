//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The passwords the suite gives the operator in Secrets. With s3SecretKey, and any PEM private
// key, they must never be in the operator's logs: TestMain reads them once the suite has run.
const (
	tlsRootPassword        = "correct-horse"
	rotatedRootPassword    = "battery-staple"
	quorumLossRootPassword = "quorum-lost-secret-pw"
	walkFirstPassword      = "first-password"
	walkSecondPassword     = "second-password"
)

// secretsGiven are what the operator's logs must never hold, as they would be written.
var secretsGiven = []string{s3SecretKey, tlsRootPassword, rotatedRootPassword, quorumLossRootPassword,
	walkFirstPassword, walkSecondPassword, "PRIVATE KEY"}

// operatorLogsHoldNoSecret reads the logs of every container of every pod in the operator's
// namespace, the previous instance's too (a crash, a failpoint), and says which of secretsGiven
// they hold. Reading nothing is a failure: it would pass whatever was logged. The kubelet keeps
// the last 10 MiB of a container's log; an e2e run's operator log is a few MiB.
func operatorLogsHoldNoSecret(cfg *rest.Config) (string, error) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := clientset.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var read, containers int
	var found []string
	for _, pod := range pods.Items {
		for _, container := range pod.Spec.Containers {
			for _, previous := range []bool{false, true} {
				log, err := clientset.CoreV1().Pods(operatorNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container.Name, Previous: previous}).DoRaw(ctx)
				if err != nil {
					if previous {
						continue // no earlier instance
					}
					return "", fmt.Errorf("the log of %s/%s: %w", pod.Name, container.Name, err)
				}
				read += len(log)
				containers++
				for _, secret := range secretsGiven {
					if strings.Contains(string(log), secret) {
						found = append(found, fmt.Sprintf("%q in the log of %s/%s (previous: %t)", secret, pod.Name, container.Name, previous))
					}
				}
			}
		}
	}
	switch {
	case read == 0:
		return "", fmt.Errorf("no log read in namespace %s: nothing was checked", operatorNamespace)
	case len(found) > 0:
		return "", fmt.Errorf("a secret given to the operator is in its logs: %s", strings.Join(found, "; "))
	}
	return fmt.Sprintf("%d bytes of %d container logs in %s hold none of the %d secrets given", read, containers, operatorNamespace, len(secretsGiven)), nil
}
