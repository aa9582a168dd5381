package agent

import (
	"testing"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
)

// The snapshot is taken from a healthy voting member with the newest data: never from a learner
// (it may be catching up, or not yet started), nor from a member that reports errors (an alarm
// such as a corrupt database), even where either is listed first or reads as far.
func TestABackupIsTakenFromAHealthyVoter(t *testing.T) {
	for name, tc := range map[string]struct {
		first  etcd.Member
		status etcd.MemberStatus
	}{
		"a learner listed first": {
			etcd.Member{ID: 1, Name: "learner", IsLearner: true, ClientURLs: []string{"https://learner:2379"}},
			etcd.MemberStatus{MemberID: 1, Revision: 100, IsLearner: true},
		},
		"a member with an alarm, further on": {
			etcd.Member{ID: 1, Name: "alarmed", ClientURLs: []string{"https://alarmed:2379"}},
			etcd.MemberStatus{MemberID: 1, Revision: 200, Errors: []string{"etcdserver: mvcc: database space exceeded"}},
		},
		"a member etcd raised CORRUPT for, further on": {
			etcd.Member{ID: 1, Name: "corrupt", ClientURLs: []string{"https://corrupt:2379"}},
			etcd.MemberStatus{MemberID: 1, Revision: 200, Alarms: []string{"CORRUPT"}, CorruptMembers: []uint64{1}},
		},
		"a member the operator found corrupt, further on": {
			etcd.Member{ID: 0x1f, Name: "found", ClientURLs: []string{"https://found:2379"}},
			etcd.MemberStatus{MemberID: 0x1f, Revision: 200},
		},
	} {
		t.Run(name, func(t *testing.T) {
			voter := etcd.Member{ID: 2, Name: "voter", ClientURLs: []string{"https://voter:2379"}}
			cluster := &etcdfake.Cluster{ID: 9, Members: []etcd.Member{tc.first, voter}, Statuses: map[string]etcd.MemberStatus{
				tc.first.ClientURLs[0]: tc.status,
				voter.ClientURLs[0]:    {MemberID: 2, LeaderID: 2, Revision: 100},
			}}
			cl, err := cluster.Dial(etcd.Config{})
			if err != nil {
				t.Fatal(err)
			}
			source, _, err := pickSource(t.Context(), cl, []string{"1f"})
			if err != nil {
				t.Fatal(err)
			}
			if source != voter.ClientURLs[0] {
				t.Fatalf("the snapshot would be taken from %s, want the healthy voter %s", source, voter.ClientURLs[0])
			}
		})
	}
}
