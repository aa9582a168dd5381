package etcd_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// What quorum-loss recovery relies on, checked against real etcd: a member whose peers are
// gone for good still answers Status (its committed raft index, to choose the survivor; no
// leader, once it has heard none for an election timeout) and
// streams a snapshot (the copy kept before anything is rewritten); restarted once with
// --force-new-cluster it serves alone, with every key it had, and lists itself only.
func TestSurvivorOfQuorumLossAnswersStatusSnapshotsAndServesAloneWhenForced(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	survivor := servers[0]
	kv := survivor.Client(t)
	for i := range 50 {
		if _, err := kv.Put(t.Context(), fmt.Sprintf("k%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	servers[1].Stop()
	servers[2].Stop()

	cl, err := etcd.New(etcd.Config{Endpoints: []string{survivor.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, _, err := cl.Members(shortCtx(t)); err == nil {
		t.Fatal("the member list answered without a quorum: the test does not lose quorum")
	}
	st, err := cl.Status(t.Context(), survivor.ClientURL)
	if err != nil || st.RaftIndex == 0 {
		t.Fatalf("status of the survivor without quorum: %+v, %v", st, err)
	}
	// It follows no leader once it has heard none for an election timeout: the recovery holds
	// while a member follows one (a quorum leads where the operator does not reach).
	for deadline := time.Now().Add(10 * time.Second); st.LeaderID != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor still follows leader %x 10 s after its peers stopped", st.LeaderID)
		}
		time.Sleep(100 * time.Millisecond)
		if st, err = cl.Status(t.Context(), survivor.ClientURL); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	info, err := cl.Snapshot(t.Context(), survivor.ClientURL, &snap)
	if err != nil || info.SizeBytes == 0 || info.Revision < 51 {
		t.Fatalf("snapshot of the survivor without quorum: %+v, %v", info, err)
	}

	survivor.Stop()
	survivor.ExtraArgs = append(survivor.ExtraArgs, "--force-new-cluster")
	survivor.Start(t, "existing", etcdtest.InitialCluster(servers...))
	survivor.WaitReady(t)
	_, members, err := cl.Members(t.Context())
	if err != nil || len(members) != 1 || members[0].Name != survivor.Name {
		t.Fatalf("members after --force-new-cluster: %+v, %v", members, err)
	}
	resp, err := kv.Get(t.Context(), "k", clientv3.WithPrefix())
	if err != nil || resp.Count != 50 {
		t.Fatalf("keys after --force-new-cluster: %v, %v", resp, err)
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}
