package resources

import (
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The archiver of an EtcdBackup with spec.continuous: the agent, running until stopped, in a
// Deployment of one pod that reads the cluster as a backup run does and writes the series'
// archive beside its snapshots.
const (
	// LabelComponent says which part of the operator's work a pod does.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentArchiver is an archiver's.
	ComponentArchiver = "archiver"
	// ArchiverContainer is the archiver's container.
	ArchiverContainer = "archiver"
	// ArchiverStatusPort, named ArchiverStatusPortName, serves the archiver's /status, which
	// the operator polls on the pod's IP, and /healthz.
	ArchiverStatusPort     = 8080
	ArchiverStatusPortName = "status"
)

// ArchiverName is the Deployment of backup's archiver.
func ArchiverName(backup string) string { return jobName(backup, "-archiver") }

// ArchiverSelector selects the pods of backup's archiver, and no Job's: a backup's runs and
// verifications carry its name too, never the archiver's component.
func ArchiverSelector(backup string) map[string]string {
	return map[string]string{LabelBackup: backup, LabelComponent: ComponentArchiver}
}

// archiverMemory bounds an archiver that closes segments at segmentMaxBytes of changes: it
// holds the open segment's changes, their encoding, and the upload of the last one, besides
// what any agent needs.
func archiverMemory(segmentMaxBytes int64) resource.Quantity {
	return *resource.NewQuantity(256<<20+3*segmentMaxBytes, resource.BinarySI)
}

// ArchiverDeployment runs the archiver of b, which archives every revision of cluster c into
// b's destination: with the pod, the etcd client certificate or root password, the storage
// mounts, credentials and service account, and the encryption keys a backup run of b has. A
// segment closes after segmentDuration or at segmentMaxBytes of changes; a lineage continues
// only under restoreMark. One replica, replaced by stopping it before its successor starts
// (Recreate): two archivers would write one lineage at once.
func ArchiverDeployment(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, agentImage string, segmentDuration time.Duration, segmentMaxBytes int64,
	restoreMark string, pods PodSettings) (*appsv1.Deployment, error) {
	cfg := seriesConfig(b, c)
	cfg.SegmentDuration, cfg.SegmentMaxBytes, cfg.RestoreMark = segmentDuration, segmentMaxBytes, restoreMark
	cfg.StatusAddr = ":" + strconv.Itoa(ArchiverStatusPort)
	env, volumes, mounts, err := seriesAgentMounts(b, c, cfg, pods)
	if err != nil {
		return nil, err
	}
	podLabels := agentPodLabels(LabelBackup, b.Name)
	podLabels[LabelComponent] = ComponentArchiver
	template := agentPodTemplate(c, podLabels, corev1.Container{
		Name: ArchiverContainer, Image: agentImage, Args: []string{"agent", "archive"}, Env: env, VolumeMounts: mounts,
		Ports: []corev1.ContainerPort{{Name: ArchiverStatusPortName, ContainerPort: ArchiverStatusPort, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(ArchiverStatusPortName)}},
			PeriodSeconds: 10,
		},
	}, volumes, pods)
	template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	template.Spec.ServiceAccountName = storageServiceAccount(b.Spec.Destination)
	template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = archiverMemory(segmentMaxBytes)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: ArchiverName(b.Name), Namespace: b.Namespace, Labels: agentJobLabels(podLabels, c)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: ArchiverSelector(b.Name)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: template,
		},
	}, nil
}
