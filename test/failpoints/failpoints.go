// Package failpoints lists the operator's failpoints — the `// gofail: var` comments in its
// source, inert in the normal build and code in the failpoint build (make failpoint-build) —
// and, for the failpoint walk (test/e2e/failpoint_walk_test.go), the operation that must make
// the operator crash at each, and how often. A test in this package keeps the list and the
// source in step, so a failpoint cannot be added without the walk reaching it, nor stay listed
// after it is gone.
package failpoints

// Failpoint is a step boundary at which the walk crashes the operator Times times.
type Failpoint struct {
	Name  string
	Times int
}

// Operation is what the walk does to reach its failpoints: every one of them is armed (as a
// panic) before it starts and re-armed after each crash, until each was hit Times times.
type Operation struct {
	Name       string
	Failpoints []Failpoint
}

// Switches are failpoints that set the failpoint build up rather than mark a step: the walk
// arms them through GOFAIL_FAILPOINTS when the operator starts.
var Switches = []string{
	// main.go: a failpoint's panic in a reconcile ends the process, as a crash there would,
	// instead of being recovered by controller-runtime.
	"crashOnPanic",
}

// Walk is the walk's operations in order, each with the failpoints it must reach. A name may
// appear under several operations (the same code runs in each); every failpoint in the source
// appears under at least one.
var Walk = []Operation{
	{
		// A 3-member cluster is created: after each member's claim, and after each member's pod
		// (the first made by the bootstrap, the others by the resumed bootstrap).
		Name: "create 3",
		Failpoints: []Failpoint{
			{"memberClaimCreated", 3},
			{"memberPodCreated", 3},
		},
	},
	{
		// 3 -> 5: each new member is added to etcd as a learner, its claim and pod made, then it
		// is promoted.
		Name: "scale 3 to 5",
		Failpoints: []Failpoint{
			{"learnerAdded", 2},
			{"memberClaimCreated", 1},
			{"memberPodCreated", 1},
			{"learnerPromoted", 2},
		},
	},
	{
		// 5 -> 3: each member is removed from etcd, then its pod and claim are deleted.
		Name: "scale 5 to 3",
		Failpoints: []Failpoint{
			{"memberRemoved", 2},
			{"orphanPodDeleted", 1},
			{"orphanClaimDeleted", 1},
		},
	},
	{
		// 3.6 -> 3.7: after each member's pod gets the new image, and after leadership moves
		// off the leader, which goes last.
		Name: "upgrade",
		Failpoints: []Failpoint{
			{"memberUpgraded", 3},
			{"leaderMoved", 1},
		},
	},
	{
		// A one-shot backup to S3: the Job made, the run recorded, the finished Job deleted.
		Name: "backup",
		Failpoints: []Failpoint{
			{"backupJobCreated", 1},
			{"backupRunRecorded", 1},
			{"backupFinishedJobDeleted", 1},
		},
	},
	{
		// The backup restored in place: the claim staged and filled by the Job, the cut-over
		// (cluster told, claim given, the old members stopped), the outcome recorded. Two of
		// the three old members' stops, not three: the cluster's reconciler may stop one while
		// the restore's, in the same process, crashes at restoreClaimGiven.
		Name: "restore in place",
		Failpoints: []Failpoint{
			{"restoreSeedClaimStaged", 1},
			{"restoreJobCreated", 1},
			{"restoreCutOverStarted", 1},
			{"restoreClaimGiven", 1},
			{"memberPodStopped", 2},
			{"restoreOutcomeRecorded", 1},
		},
	},
	{
		// The backup restored into a new cluster: the cluster made, its member's claim made
		// with the restore its pods run, the cluster let form, the outcome recorded.
		Name: "restore into a new cluster",
		Failpoints: []Failpoint{
			{"restoreTargetCreated", 1},
			{"restoreMemberClaimsMade", 1},
			{"restoreSeedReleased", 1},
			{"restoreOutcomeRecorded", 1},
		},
	},
	{
		// A TLS cluster with root authentication is created: its CA, then each of its peer,
		// server and client certificates; once it is complete, the root password is recorded
		// as pending, set in etcd, and authentication enabled.
		Name: "create with TLS and auth",
		Failpoints: []Failpoint{
			{"caCreated", 1},
			{"certificateIssued", 3},
			{"rootPasswordPendingRecorded", 1},
			{"rootPasswordSet", 1},
			{"authEnabled", 1},
		},
	},
	{
		// The user's Secret gets a new root password: recorded as pending, then set in etcd.
		Name: "change the root password",
		Failpoints: []Failpoint{
			{"rootPasswordPendingRecorded", 1},
			{"rootPasswordSet", 1},
		},
	},
	{
		// The certificates reach their renewal time and are issued again.
		Name: "renew certificates",
		Failpoints: []Failpoint{
			{"certificateRenewed", 1},
		},
	},
	{
		// The CA is replaced on the annotation: the new CA made (crashing before status
		// records it), members restarted one at a time to trust both CAs, the CA Secret
		// swapped (crashing before any certificate is issued from it), every certificate
		// issued from the new CA, members restarted again to drop the old one.
		Name: "rotate the CA",
		Failpoints: []Failpoint{
			{"caRotationNewCAMade", 1},
			{"memberPodStopped", 1},
			{"caRotationCASwapped", 1},
		},
	},
	{
		// Two of the three members lose their pods and claims for good: the survivor is
		// stopped, its data copied by a Job, it is restarted alone with --force-new-cluster and,
		// once it serves, stopped again to restart without the flag.
		Name: "recover a lost quorum",
		Failpoints: []Failpoint{
			{"quorumSurvivorStopped", 1},
			{"quorumCopyJobCreated", 1},
			{"quorumForcedPodCreated", 1},
			{"memberPodStopped", 1},
		},
	},
	{
		// Every member loses its pod and claim for good (policy FromLatestBackup): the recovery
		// is recorded with the newest snapshot, its in-place EtcdRestore made, and that restore
		// stages the snapshot, cuts over and records its outcome.
		Name: "restore a lost cluster from its latest backup",
		Failpoints: []Failpoint{
			{"quorumRestoreCreated", 1},
			{"restoreSeedClaimStaged", 1},
			{"restoreJobCreated", 1},
			{"restoreCutOverStarted", 1},
			{"restoreClaimGiven", 1},
			{"restoreOutcomeRecorded", 1},
		},
	},
}

// Names are every failpoint of the walk, each once.
func Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, op := range Walk {
		for _, fp := range op.Failpoints {
			if !seen[fp.Name] {
				seen[fp.Name] = true
				out = append(out, fp.Name)
			}
		}
	}
	return out
}
