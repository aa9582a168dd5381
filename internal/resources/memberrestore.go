package resources

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// AnnotationMemberRestore, on the claim of a member that a restore into a new cluster prepares
// in the member's own pod, is that restore (MemberRestore, as JSON). Every pod of the member
// made while it is there restores the data before etcd starts, and does nothing once the data
// is installed; the restore takes it off once it completes.
const AnnotationMemberRestore = "etcd.database.dev/member-restore"

// Init containers of a member pod that restores its data, in order (jobspec says what each
// does).
const (
	MemberRestoreFetchContainer   = "restore-fetch"
	MemberRestoreInstallContainer = "restore-install"
	agentBinVolume                = "agent-bin"
)

// MemberRestore is the restore a member's pod runs before etcd starts: the snapshot, the
// members restored from it together, and the agent image that fetches it.
type MemberRestore struct {
	// Restore is the EtcdRestore's name.
	Restore    string        `json:"restore"`
	AgentImage string        `json:"agentImage"`
	Members    []string      `json:"members"`
	Source     RestoreSource `json:"source"`
	// Env is the operator's proxy settings, for the fetch: added where the pod is made, never
	// recorded on the claim.
	Env []corev1.EnvVar `json:"-"`
}

// MemberRestoreAnnotation is the value of AnnotationMemberRestore for r.
func MemberRestoreAnnotation(r MemberRestore) string {
	raw, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal the member restore: %v", err)) // plain structs always marshal
	}
	return string(raw)
}

// MemberRestoreOf is the restore pvc asks its member's pods to run, or nil.
func MemberRestoreOf(pvc *corev1.PersistentVolumeClaim) (*MemberRestore, error) {
	raw, ok := pvc.Annotations[AnnotationMemberRestore]
	if !ok {
		return nil, nil
	}
	r := &MemberRestore{}
	if err := json.Unmarshal([]byte(raw), r); err != nil {
		return nil, fmt.Errorf("claim %s: annotation %s: %w", pvc.Name, AnnotationMemberRestore, err)
	}
	return r, nil
}

// addMemberRestore gives a member's pod the init containers that restore its data, as a
// restore Job's containers do, but in two: the agent's fetch, which also leaves its binary in
// an emptyDir, and, in the member's own etcd image, that binary running the image's etcdutl and
// installing the result.
func addMemberRestore(pod *corev1.Pod, c *etcdv1alpha1.EtcdCluster, m MemberSpec, images EtcdImages) {
	r := m.Restore
	env, err := restoreFetchEnv(c, r.Source, r.Env)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	volumes, mounts := storageVolumes(r.Source.Storage, r.Source.Encryption)
	data := corev1.VolumeMount{Name: dataVolume, MountPath: dataMount}
	bin := corev1.VolumeMount{Name: agentBinVolume, MountPath: jobspec.AgentBinDir}
	fetch := agentContainer(corev1.Container{
		Name: MemberRestoreFetchContainer, Image: r.AgentImage, Args: []string{"agent", "member-restore-fetch"},
		Env: env, VolumeMounts: append(mounts, data, bin),
	})
	install := agentContainer(corev1.Container{
		Name: MemberRestoreInstallContainer, Image: Image(c, images, m.Version),
		Command: []string{jobspec.AgentBinary},
		Args: append([]string{"agent", "member-restore-install", etcdutlPath},
			etcdutlRestoreArgs(c, RestoreMember{Name: m.Name, Members: r.Members}, r.Source.RevisionBump)...),
		VolumeMounts: []corev1.VolumeMount{data, bin},
	})
	// etcdutl maps the member's database as etcd will: bounded as etcd is, not as the agent,
	// whose stream holds no database (under the agent's limit, the page cache of a 256 MiB
	// database was reclaimed as it was written, and the restore took 2-3 s instead of 1 s).
	install.Resources = memberResources(c)
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, fetch, install)
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: agentBinVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}
