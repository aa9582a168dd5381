package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// One real three-member cluster goes through every membership step the operator takes: add a
// learner, promote it once caught up, move leadership, remove members.
func TestMembershipStepsAgainstRealEtcd(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	c, err := etcd.New(etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()

	clusterID, members := mustMembers(t, c)
	if clusterID == 0 || len(members) != 3 {
		t.Fatalf("cluster %x with %d members, want 3", clusterID, len(members))
	}
	leader := leaderOf(t, c, servers)

	// A learner is in the member list before its process exists, with no name yet.
	joiner := etcdtest.NewServer(t, "m3")
	// etcd refuses membership changes until every member has been connected for a few
	// seconds ("unhealthy cluster"); the operator retries, and so does this test.
	var learner etcd.Member
	eventually(t, 20*time.Second, func() (err error) {
		learner, err = c.AddLearner(ctx, joiner.PeerURL)
		return err
	})
	if !learner.IsLearner || learner.ID == 0 {
		t.Fatalf("added %+v, want a learner with an ID", learner)
	}
	if err := c.PromoteLearner(ctx, learner.ID); !errors.Is(err, etcd.ErrLearnerNotReady) {
		t.Fatalf("promoting a learner that has not started: %v, want ErrLearnerNotReady", err)
	}

	joiner.Start(t, "existing", etcdtest.InitialCluster(append(servers, joiner)...))
	eventually(t, 20*time.Second, func() error { return c.PromoteLearner(ctx, learner.ID) })
	_, members = mustMembers(t, c)
	if len(members) != 4 || slices.ContainsFunc(members, func(m etcd.Member) bool { return m.IsLearner }) {
		t.Fatalf("after promotion: %+v, want four voters", members)
	}
	// The promoted member learns of its promotion when it applies the entry: poll.
	eventually(t, 10*time.Second, func() error {
		st, err := c.Status(ctx, joiner.ClientURL)
		if err == nil && (st.MemberID != learner.ID || st.IsLearner || st.Version != "3.6.16" || st.DBSizeBytes == 0) {
			err = fmt.Errorf("status of the promoted member: %+v", st)
		}
		return err
	})

	// Leadership moves only when asked on the leader. It goes to an original member so that
	// removing the promoted one below does not remove the leader.
	var target uint64
	for _, m := range members {
		if m.ID != leader.id && m.ID != learner.ID {
			target = m.ID
			break
		}
	}
	if err := c.MoveLeader(ctx, leader.clientURL, target); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		st, err := c.Status(ctx, joiner.ClientURL)
		if err == nil && st.LeaderID != target {
			err = errors.New("leadership not moved yet")
		}
		return err
	})

	if err := c.RemoveMember(ctx, learner.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveMember(ctx, learner.ID); err != nil {
		t.Fatalf("removing a member twice must succeed (idempotent step): %v", err)
	}
	if _, members = mustMembers(t, c); len(members) != 3 {
		t.Fatalf("after removal: %d members, want 3", len(members))
	}
}

func TestStatusOfAStoppedMemberFails(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	c, err := etcd.New(etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	servers[0].Stop()
	if _, err := c.Status(t.Context(), servers[0].ClientURL); err == nil {
		t.Fatal("status of a stopped member succeeded")
	}
}

type leaderInfo struct {
	id        uint64
	clientURL string
}

func leaderOf(t *testing.T, c etcd.Client, servers []*etcdtest.Server) leaderInfo {
	t.Helper()
	for _, s := range servers {
		st, err := c.Status(t.Context(), s.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		if st.LeaderID == st.MemberID {
			return leaderInfo{id: st.MemberID, clientURL: s.ClientURL}
		}
	}
	t.Fatal("no member reports itself as leader")
	return leaderInfo{}
}

func mustMembers(t *testing.T, c etcd.Client) (uint64, []etcd.Member) {
	t.Helper()
	id, members, err := c.Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return id, members
}

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after %v: %v", timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Turning auth on is resumable, and the root password can be changed: a root user left by an
// interrupted attempt with another password (the Secret was changed meanwhile) gets the password
// asked for; with authentication on, the password changes under a client authenticated with
// the old one, which is refused from then on.
func TestRootPasswordIsSetAndChangedAgainstRealEtcd(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	endpoints := etcdtest.ClientURLs(servers)
	if _, err := servers[0].Client(t).UserAdd(t.Context(), "root", "earlier"); err != nil {
		t.Fatal(err)
	}
	c, err := etcd.New(etcd.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if on, err := c.AuthEnabled(t.Context()); err != nil || on {
		t.Fatalf("auth enabled = %v, %v before enabling", on, err)
	}
	if err := c.SetRootPassword(t.Context(), "s3cret"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnableAuth(t.Context()); err != nil {
		t.Fatal(err)
	}

	root, err := etcd.New(etcd.Config{Endpoints: endpoints, Username: "root", Password: "s3cret"})
	if err != nil {
		t.Fatalf("root with the password auth was enabled with: %v", err)
	}
	defer root.Close()
	if on, err := root.AuthEnabled(t.Context()); err != nil || !on {
		t.Fatalf("auth enabled = %v, %v after enabling", on, err)
	}
	if _, _, err := root.Members(t.Context()); err != nil {
		t.Fatalf("root cannot list members: %v", err)
	}
	if _, err := servers[0].Client(t).Put(t.Context(), "k", "v"); err == nil {
		t.Fatal("an anonymous client could write with auth on")
	}
	// A client with no user is refused everything, the member list too, as etcdfake refuses
	// it: the operator of a cluster without spec.auth whose etcd has authentication on (its
	// data restored from a snapshot of a cluster with it) learns nothing of it but that.
	if _, _, err := c.Members(t.Context()); !etcd.RefusedTheUser(err) {
		t.Fatalf("member list for a client with no user, auth on: %v, want a refusal of the user", err)
	}
	if _, err := c.Status(t.Context(), endpoints[0]); !etcd.RefusedTheUser(err) {
		t.Fatalf("status for a client with no user, auth on: %v, want a refusal of the user", err)
	}
	if _, err := c.AuthEnabled(t.Context()); !etcd.RefusedTheUser(err) {
		t.Fatalf("auth status for a client with no user, auth on: %v, want a refusal of the user", err)
	}

	if err := root.SetRootPassword(t.Context(), "rotated"); err != nil {
		t.Fatalf("change the password with auth on: %v", err)
	}
	if _, err := etcd.New(etcd.Config{Endpoints: endpoints, Username: "root", Password: "s3cret"}); !errors.Is(err, etcd.ErrAuthFailed) {
		t.Fatalf("the old password after the change: %v, want ErrAuthFailed", err)
	}
	rotated, err := etcd.New(etcd.Config{Endpoints: endpoints, Username: "root", Password: "rotated"})
	if err != nil {
		t.Fatalf("root with the new password: %v", err)
	}
	defer rotated.Close()
	if _, _, err := rotated.Members(t.Context()); err != nil {
		t.Fatalf("root with the new password cannot list members: %v", err)
	}
}

// A member that fills its quota raises NOSPACE and refuses writes; compaction plus
// defragmentation gives the space back and disarming lets writes through again.
func TestNoSpaceRecoveryAgainstRealEtcd(t *testing.T) {
	s := etcdtest.NewServer(t, "m0")
	s.ExtraArgs = []string{"--quota-backend-bytes", "16777216"}
	s.Start(t, "new", etcdtest.InitialCluster(s))
	s.WaitReady(t)
	raw := s.Client(t)
	c, err := etcd.New(etcd.Config{Endpoints: []string{s.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()

	value := strings.Repeat("x", 512*1024)
	var lastRev int64
	for i := 0; ; i++ {
		resp, err := raw.Put(ctx, "big", value)
		if err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("put %d: %v", i, err)
			}
			break
		}
		lastRev = resp.Header.Revision
		if i > 200 {
			t.Fatal("quota never reached")
		}
	}
	st, err := c.Status(ctx, s.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.Alarms, "NOSPACE") || len(st.Errors) != 0 {
		t.Fatalf("status alarms %v errors %v: want NOSPACE as an alarm, not an error", st.Alarms, st.Errors)
	}

	if _, err := raw.Compact(ctx, lastRev); err != nil {
		t.Fatal(err)
	}
	if err := c.Defragment(ctx, s.ClientURL); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Status(ctx, s.ClientURL)
	if after.DBSizeBytes >= st.DBSizeBytes {
		t.Fatalf("defragmentation gave nothing back: %d -> %d bytes", st.DBSizeBytes, after.DBSizeBytes)
	}
	if err := c.DisarmNoSpace(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "after", "ok"); err != nil {
		t.Fatalf("write after disarming: %v", err)
	}
}

// What Member.Started rests on: two of three initial members serve, and etcd lists the third by
// its name from --initial-cluster though it has never run; only its client URLs are missing
// until it starts. A learner added since is listed with neither.
func TestAnInitialMemberIsListedByNameBeforeItRuns(t *testing.T) {
	servers := etcdtest.NewServers(t, 3)
	initial := etcdtest.InitialCluster(servers...)
	for _, s := range servers[:2] {
		s.Start(t, "new", initial)
	}
	for _, s := range servers[:2] {
		s.WaitReady(t)
	}
	c, err := etcd.New(etcd.Config{Endpoints: etcdtest.ClientURLs(servers[:2])})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	started := func() map[string]bool {
		_, members := mustMembers(t, c)
		out := map[string]bool{}
		for _, m := range members {
			out[m.Name] = m.Started()
		}
		return out
	}
	if got := started(); len(got) != 3 || !got["m0"] || !got["m1"] || got["m2"] {
		t.Fatalf("started by name %v, want m0 and m1 started and m2 listed by name, not started", got)
	}
	servers[2].Start(t, "new", initial)
	servers[2].WaitReady(t)
	eventually(t, 10*time.Second, func() error {
		if got := started(); !got["m2"] {
			return fmt.Errorf("started by name %v after m2 serves", got)
		}
		return nil
	})
}

// RefusedTheUser tells etcd's refusals of the user (as clientv3 returns them, wrapped) from
// every other failure.
func TestRefusedTheUser(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("status of x: %w", rpctypes.ErrUserEmpty), true},
		{fmt.Errorf("hash: %w", rpctypes.ErrUserNotFound), true},
		{fmt.Errorf("hash: %w", rpctypes.ErrPermissionDenied), true},
		{fmt.Errorf("connect: %w", etcd.ErrAuthFailed), true},
		{fmt.Errorf("hash: %w", rpctypes.ErrGRPCUserEmpty), true},
		{fmt.Errorf("status of x: %w", context.DeadlineExceeded), false},
		{fmt.Errorf("hash: %w", rpctypes.ErrCompacted), false},
		{nil, false},
	} {
		if got := etcd.RefusedTheUser(tc.err); got != tc.want {
			t.Errorf("RefusedTheUser(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

// A CORRUPT alarm, as etcd's compaction hash check raises it, names the member in every
// member's status, stops writes, and is cleared by DisarmCorrupt for that member only.
func TestCorruptAlarmIsReportedByMemberAndDisarmedAgainstRealEtcd(t *testing.T) {
	s := etcdtest.NewServer(t, "m0")
	s.Start(t, "new", etcdtest.InitialCluster(s))
	s.WaitReady(t)
	raw := s.Client(t)
	c, err := etcd.New(etcd.Config{Endpoints: []string{s.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	st, err := c.Status(ctx, s.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	const other = 0x1234 // a member removed since: its alarm stays until disarmed
	for _, id := range []uint64{st.MemberID, other} {
		if _, err := pb.NewMaintenanceClient(raw.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_CORRUPT,
		}); err != nil {
			t.Fatalf("raise CORRUPT for %x: %v", id, err)
		}
	}
	st, err = c.Status(ctx, s.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.CorruptMembers)
	if want := []uint64{other, st.MemberID}; !slices.Equal(st.CorruptMembers, want) || !slices.Contains(st.Alarms, "CORRUPT") || len(st.Errors) != 0 {
		t.Fatalf("status: corrupt members %x alarms %v errors %v; want %x with CORRUPT as an alarm", st.CorruptMembers, st.Alarms, st.Errors, want)
	}
	if _, err := raw.Put(ctx, "k", "v"); err == nil {
		t.Fatal("a write went through while CORRUPT was raised")
	}
	if err := c.DisarmCorrupt(ctx, st.MemberID); err != nil {
		t.Fatal(err)
	}
	st, _ = c.Status(ctx, s.ClientURL)
	if !slices.Equal(st.CorruptMembers, []uint64{other}) {
		t.Fatalf("after disarming %x: corrupt members %x", st.MemberID, st.CorruptMembers)
	}
	if err := c.DisarmCorrupt(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("write after disarming every CORRUPT alarm: %v", err)
	}
}

// A client kept across looks, whose member was down for a while (a crashed pod restarting),
// reaches it again within seconds of its return: with gRPC's default back-off (1 s, ×1.6, up
// to 2 min) it tried again only at the end of its current wait: 5.8–6.3 s after 17 s down.
func TestAKeptClientReachesAMemberSoonAfterItIsBack(t *testing.T) {
	s := etcdtest.StartCluster(t, 1)[0]
	c, err := etcd.New(etcd.Config{Endpoints: []string{s.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	members := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		_, _, err := c.Members(ctx)
		return err
	}
	if err := members(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	// The operator's looks go on while the member is down, and fail.
	for down := time.Now(); time.Since(down) < 17*time.Second; time.Sleep(time.Second) {
		if members(500*time.Millisecond) == nil {
			t.Fatal("a stopped member answered")
		}
	}
	s.Start(t, "existing", etcdtest.InitialCluster(s))
	s.WaitReady(t) // through a new client of its own
	back := time.Now()
	for members(500*time.Millisecond) != nil {
		if time.Since(back) > 30*time.Second {
			t.Fatal("the kept client did not reach the member within 30 s of its return")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(back); took > 4500*time.Millisecond {
		t.Errorf("the kept client reached the member %v after it was back, want within 4.5 s (the back-off's 3-s ceiling, jittered)", took.Round(100*time.Millisecond))
	}
}

// The operator asks each member about itself (Status) on every look. clientv3 dials the member
// anew for each such call: a DNS lookup and a TCP, HTTP/2 and, with TLS, a TLS handshake on
// every look, for the operator and for the member; nearly half of an idle operator's CPU on a node with
// a hundred clusters (profiled). A kept client asks over one connection per member, for its
// life, and the member's digest (KeyspaceAt) goes over it too; a client of one member asks over
// its own connection. Counted at a forwarder in front of the member; and after the member
// restarts, the same connection comes back.
func TestAKeptClientAsksAMemberAboutItselfOverOneConnection(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	var accepted atomic.Int32
	url := "http://" + forwardCounting(t, "127.0.0.1", servers[0].ClientURL[len("http://"):], &accepted)
	askTenTimes := func(c etcd.Client) {
		t.Helper()
		for range 10 {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			st, err := c.Status(ctx, url)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.KeyspaceAt(t.Context(), url, st.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A client of the three members: its own connection may reach this one, and its kept one does.
	all, err := etcd.New(etcd.Config{Endpoints: []string{url, servers[1].ClientURL, servers[2].ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	askTenTimes(all)
	_ = all.Close()
	if n := accepted.Swap(0); n > 2 {
		t.Errorf("ten statuses and digests of a member through a client of three took %d connections to it, want at most 2", n)
	}

	// A client of this member alone.
	c, err := etcd.New(etcd.Config{Endpoints: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	askTenTimes(c)
	if n := accepted.Load(); n > 1 {
		t.Errorf("ten statuses and digests of its one member took a client %d connections, want 1", n)
	}

	servers[0].Stop()
	status := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := c.Status(ctx, url)
		return err
	}
	if status() == nil {
		t.Fatal("a stopped member answered")
	}
	servers[0].Start(t, "existing", etcdtest.InitialCluster(servers...))
	servers[0].WaitReady(t)
	eventually(t, 10*time.Second, status)
}
