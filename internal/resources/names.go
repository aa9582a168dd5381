// Package resources builds the Kubernetes objects of an etcd cluster — member pods and claims,
// Services, the PodDisruptionBudget — as pure functions of the EtcdCluster and the member, and
// owns the naming scheme that ties them to etcd's member list.
package resources

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Labels and annotations the operator puts on the objects it makes.
const (
	LabelCluster   = "etcd.database.dev/cluster"
	LabelMember    = "etcd.database.dev/member"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	// LabelServesClients on a member pod puts it in the client Service's selection. A quorum
	// recovery takes it off the pods of the members it does without (FenceMembers) before it
	// forces the survivor, so that an old member that comes back, or a pod whose node stopped
	// answering and that can never be confirmed gone, is never a client endpoint of the forced
	// cluster; the pod's own deletion may wait for ever on a node that does not answer, a
	// label change does not.
	LabelServesClients = "etcd.database.dev/serves-clients"
	// LabelVoter ("true") is on the pod of a member etcd lists as a voter, as the operator last
	// observed it: the PodDisruptionBudget selects these pods alone, so that a learner's Ready
	// pod, which casts no vote, never lets a drain take a voter that quorum needs.
	LabelVoter = "etcd.database.dev/voter"

	// AnnotationInitialCluster records, on bootstrap members' pods and claims, the
	// --initial-cluster they were created with: the bootstrap plan survives an operator
	// restart in the middle of a bootstrap.
	AnnotationInitialCluster = "etcd.database.dev/initial-cluster"
	// AnnotationClusterState records whether the member was created to form the cluster
	// ("new") or to join it ("existing").
	AnnotationClusterState = "etcd.database.dev/initial-cluster-state"
	// AnnotationPodSpecHash records, on a member pod, MemberPodSpecHash of the spec it was
	// made from.
	AnnotationPodSpecHash = "etcd.database.dev/pod-spec-hash"
	// AnnotationTrustedCAHash records, on a member pod of a cluster with tls.provider Secrets,
	// TrustedCAHash of the CAs its Secrets held when it was made: etcd reads them only at
	// start, so a pod whose record differs from the Secrets now is restarted to load them.
	AnnotationTrustedCAHash = "etcd.database.dev/trusted-ca-hash"
	// AnnotationRestorePending, on an EtcdCluster, names the EtcdRestore still preparing its
	// first member's data: the cluster does not form until the restore removes it.
	AnnotationRestorePending = "etcd.database.dev/restore-pending"
	// AnnotationRestoreSeed, on an EtcdCluster restored in place, is the member whose claim
	// holds the restored data: the cluster stops its old members and forms again from it.
	AnnotationRestoreSeed = "etcd.database.dev/restore-seed"
	// AnnotationRevisionBump, on a restore Job, is the revision bump its etcdutl applies: what
	// the restore records once the Job has succeeded.
	AnnotationRevisionBump = "etcd.database.dev/revision-bump"
	// AnnotationRestoredBy, on an EtcdCluster, names the EtcdRestore that created it.
	AnnotationRestoredBy = "etcd.database.dev/restored-by"
	// AnnotationForceNewCluster marks the pod of a member restarted with --force-new-cluster.
	AnnotationForceNewCluster = "etcd.database.dev/force-new-cluster"
	// AnnotationEtcdVersion on a member pod is the etcd version its image runs, which an image
	// pinned by digest does not say. On a member's claim, it is the version an upgrade chose for
	// the member: its next pod runs it.
	AnnotationEtcdVersion = "etcd.database.dev/etcd-version"
	// AnnotationFenced on a member pod records when a quorum recovery took it out of the
	// client Service's selection: it is never put back (the pod is being deleted).
	AnnotationFenced = "etcd.database.dev/fenced"
	// AnnotationCorruptEvidence on a member's claim records why its data was found diverged
	// from the other members'. Written at the first look that finds it, before any step acts on
	// it: the claim, whose data is the evidence, is then kept when the member goes, whatever a
	// later look at the cluster's status shows.
	AnnotationCorruptEvidence = "etcd.database.dev/corrupt-evidence"
	// AnnotationUserAnnotations on the client Service lists, comma-separated and sorted, the
	// keys of its annotations that came from spec.clientService.annotations: those the operator
	// removes once they leave the spec. Any other annotation (a cloud controller's, a user's
	// kubectl annotate) is someone else's, and kept.
	AnnotationUserAnnotations = "etcd.database.dev/user-annotations"

	managerName = "etcd-operator"
)

// Ports of an etcd member.
const (
	ClientPort  = 2379
	PeerPort    = 2380
	MetricsPort = 2381
)

// PeerServiceName is the headless Service that gives each member its DNS name.
func PeerServiceName(cluster string) string { return cluster + "-peer" }

// ClientServiceName is the Service clients connect to.
func ClientServiceName(cluster string) string { return cluster + "-client" }

// PVCName is the claim holding a member's data.
func PVCName(member string) string { return "data-" + member }

// QuorumRecoveryClaimName is the claim that keeps a copy of the data of the survivor of a quorum
// lost for good, made before the survivor is restarted with --force-new-cluster.
func QuorumRecoveryClaimName(cluster string) string { return cluster + "-quorum-recovery" }

// QuorumRecoveryRestoreName is the EtcdRestore that restores a cluster whose every member lost
// its data, for the recovery begun at began: at most 50+11 characters, within the 63 an
// EtcdRestore name may have (its Jobs are labelled with it).
func QuorumRecoveryRestoreName(cluster string, began time.Time) string {
	return cluster + "-qr-" + strconv.FormatInt(began.Unix(), 36)
}

// NewMemberName makes a fresh member name. Names are random rather than ordinal, so that a
// replaced member never reuses an identity and nothing ever sorts members by name.
func NewMemberName(cluster string) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return memberName(cluster, b)
}

// BootstrapMemberNames are the names of the members that first form the cluster, derived from
// its UID: a bootstrap repeated from a stale cache (which did not yet show the first one's
// pods) makes the very same members, never a second cluster beside the first.
func BootstrapMemberNames(c *etcdv1alpha1.EtcdCluster, size int) []string {
	names := make([]string, 0, size)
	for i := 0; len(names) < size; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/bootstrap/%d", c.UID, i))
		if name := memberName(c.Name, sum[:5]); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// SeedMemberName is the first member of a cluster restored from a snapshot, derived from the
// restore's UID so that every reconcile of that restore prepares the same member.
func SeedMemberName(cluster, restoreUID string) string {
	sum := sha256.Sum256([]byte(restoreUID))
	return memberName(cluster, sum[:5])
}

// RestoreMemberNames are the n members a restore prepares from its snapshot, all at once, the
// first of them SeedMemberName: derived from the restore's UID, as the seed is, so that every
// reconcile of that restore prepares the very same members.
func RestoreMemberNames(cluster, restoreUID string, n int) []string {
	names := []string{SeedMemberName(cluster, restoreUID)}
	for i := 1; len(names) < n; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/member/%d", restoreUID, i))
		if name := memberName(cluster, sum[:5]); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func memberName(cluster string, random []byte) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789" // no vowels: no accidental words
	b := make([]byte, len(random))
	for i := range random {
		b[i] = alphabet[int(random[i])%len(alphabet)]
	}
	return cluster + "-" + string(b)
}

// memberHost is the member's stable DNS name through the peer Service.
func memberHost(c *etcdv1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s.%s.%s.svc", member, PeerServiceName(c.Name), c.Namespace)
}

func scheme(c *etcdv1alpha1.EtcdCluster) string {
	if c.Spec.TLS != nil {
		return "https"
	}
	return "http"
}

// PeerURL is the URL a member advertises to its peers.
func PeerURL(c *etcdv1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s://%s:%d", scheme(c), memberHost(c, member), PeerPort)
}

// MemberHostPort is the address at which a member serves port, by its DNS name.
func MemberHostPort(c *etcdv1alpha1.EtcdCluster, member string, port int) string {
	return net.JoinHostPort(memberHost(c, member), strconv.Itoa(port))
}

// ClientURL is the URL a member advertises to clients.
func ClientURL(c *etcdv1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s://%s:%d", scheme(c), memberHost(c, member), ClientPort)
}

// ClientEndpoint is the URL clients use through the client Service.
func ClientEndpoint(c *etcdv1alpha1.EtcdCluster) string {
	return fmt.Sprintf("%s://%s.%s.svc:%d", scheme(c), ClientServiceName(c.Name), c.Namespace, ClientPort)
}

// MemberNameFromPeerURL recovers a member's name from its peer URL. etcd lists a learner that
// has not started yet with its peer URL but no name; the URL is how the operator knows which
// pod belongs to it.
func MemberNameFromPeerURL(c *etcdv1alpha1.EtcdCluster, peerURL string) (string, bool) {
	u, err := url.Parse(peerURL)
	if err != nil {
		return "", false
	}
	suffix := "." + PeerServiceName(c.Name) + "." + c.Namespace + ".svc"
	name, ok := strings.CutSuffix(u.Hostname(), suffix)
	if !ok || !strings.HasPrefix(name, c.Name+"-") || strings.Contains(name, ".") {
		return "", false
	}
	return name, true
}

// InitialCluster renders etcd's --initial-cluster for the named members.
func InitialCluster(c *etcdv1alpha1.EtcdCluster, members []string) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m + "=" + PeerURL(c, m)
	}
	return strings.Join(parts, ",")
}

// MembersOfInitialCluster lists the member names in an --initial-cluster value.
func MembersOfInitialCluster(initialCluster string) []string {
	var names []string
	for _, part := range strings.Split(initialCluster, ",") {
		if name, _, ok := strings.Cut(part, "="); ok && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// ClusterLabels select every object of a cluster.
func ClusterLabels(c *etcdv1alpha1.EtcdCluster) map[string]string {
	return map[string]string{
		LabelCluster:   c.Name,
		LabelName:      "etcd",
		LabelInstance:  c.Name,
		LabelManagedBy: managerName,
	}
}

// MemberLabels select one member's pod and claim.
func MemberLabels(c *etcdv1alpha1.EtcdCluster, member string) map[string]string {
	l := ClusterLabels(c)
	l[LabelMember] = member
	return l
}

// ClientEndpointSelector selects the pods the client Service may send clients to: the
// cluster's member pods that no quorum recovery fenced. Readiness narrows it further to
// members that serve.
func ClientEndpointSelector(c *etcdv1alpha1.EtcdCluster) map[string]string {
	s := Selector(c)
	s[LabelServesClients] = "true"
	return s
}

// ManagedBy is the label on every object the operator makes, and what the manager caches of
// their kinds: nothing of the same kinds made by others (controllers.CacheOptions).
func ManagedBy() map[string]string {
	return map[string]string{LabelManagedBy: managerName}
}

// Selector selects the pods of a cluster.
func Selector(c *etcdv1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelCluster: c.Name}
}

// VoterSelector selects the pods of a cluster's voting members (LabelVoter).
func VoterSelector(c *etcdv1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelCluster: c.Name, LabelVoter: "true"}
}
