// Package etcdfake is a scripted, in-memory etcd for unit tests of the code that acts on
// etcd through the etcd.Client interface (after cluster-api's fake etcd client). A test sets
// the cluster's state, dials it through etcd.NewCacheWith(cluster.Dial) as the reconciler
// does, and reads back what was changed. It models only what the operator relies on; every
// behaviour it models is also tested against real etcd in package etcd.
package etcdfake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// ErrUnreachable is what a dial, or a call, fails with while Cluster.Unreachable is set.
var ErrUnreachable = errors.New("etcdfake: no member answers")

// Cluster is the fake's state. Lock it (or use its methods) when the code under test may run
// concurrently.
type Cluster struct {
	mu sync.Mutex

	ID          uint64
	Members     []etcd.Member
	Statuses    map[string]etcd.MemberStatus // by client URL
	Unreachable bool
	// NoQuorum: a majority is lost. The member list and every change fail, as they need a
	// quorum; each member in Statuses still answers its own status, as a real one does, with
	// no leader unless LeaderWithoutQuorum (a quorum the operator does not reach still leads).
	NoQuorum            bool
	LeaderWithoutQuorum bool

	// AuthEnabled and RootPassword model etcd's authentication: with it on, a dial with
	// another password fails with etcd.ErrAuthFailed, as a real dial does, and a client dialled
	// with no user name is refused every call (rpctypes.ErrUserEmpty), the member list too, as
	// real etcd 3.6 refuses it (TestRootPasswordIsSetAndChangedAgainstRealEtcd). A login with a
	// password needs a quorum (etcd issues the token through raft): under NoQuorum the dial
	// times out. A client certificate, whose common name real etcd takes for the user, counts
	// as root's, as the operator's is issued for root: it needs no login
	// (TestWithoutAQuorumAPasswordLoginFailsAndRootsCertificateIsAnswered). RootUser says the
	// root user exists.
	AuthEnabled  bool
	RootUser     bool
	RootPassword string

	// Calls lists the state-changing calls made, in order ("SetRootPassword", "EnableAuth", ...).
	Calls []string
	// Fail makes the named call fail with the given error.
	Fail map[string]error
	// Hold makes the named call wait, before it takes effect, until the channel is closed: a
	// call that takes long, such as a defragmentation. A member held in Defragment answers no
	// Status, as a real one rewriting its database does not.
	Hold map[string]chan struct{}

	busy map[string]bool // client URLs of members held in Defragment: they answer no Status
}

// Dial connects as etcd.New would: with a user name, it authenticates first.
func (f *Cluster) Dial(cfg etcd.Config) (etcd.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Unreachable {
		return nil, ErrUnreachable
	}
	if cfg.Username != "" && f.AuthEnabled && (!f.RootUser || cfg.Password != f.RootPassword) {
		return nil, fmt.Errorf("etcdfake: %w", etcd.ErrAuthFailed)
	}
	if cfg.Username != "" && f.AuthEnabled && f.NoQuorum {
		return nil, fmt.Errorf("etcdfake: authenticate without a quorum: %w", context.DeadlineExceeded)
	}
	certificate := cfg.TLS != nil && len(cfg.TLS.Certificates) > 0
	return &client{f: f, anonymous: cfg.Username == "" && !certificate}, nil
}

// Password is the root password etcd has now.
func (f *Cluster) Password() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.RootPassword
}

type client struct {
	f *Cluster
	// anonymous: dialled with no user name.
	anonymous bool
}

// refused is etcd's refusal of a client with no user while authentication is on.
func (c *client) refused() bool { return c.anonymous && c.f.AuthEnabled }

// call records a state-changing call and returns the error scripted for it. One etcd refuses
// is not recorded: it changed nothing.
func (c *client) call(name string) error {
	if c.f.Unreachable || c.f.NoQuorum {
		return ErrUnreachable
	}
	if c.refused() {
		return rpctypes.ErrUserEmpty
	}
	c.f.Calls = append(c.f.Calls, name)
	return c.f.Fail[name]
}

func (c *client) Members(context.Context) (uint64, []etcd.Member, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.Unreachable || c.f.NoQuorum {
		return 0, nil, ErrUnreachable
	}
	if c.refused() {
		return 0, nil, fmt.Errorf("list members: %w", rpctypes.ErrUserEmpty) // as the real client says it
	}
	return c.f.ID, append([]etcd.Member(nil), c.f.Members...), nil
}

func (c *client) Status(_ context.Context, clientURL string) (etcd.MemberStatus, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	st, ok := c.f.Statuses[clientURL]
	if c.f.Unreachable || !ok || c.f.busy[clientURL] {
		return etcd.MemberStatus{}, fmt.Errorf("status of %s: %w", clientURL, ErrUnreachable)
	}
	if c.refused() {
		return etcd.MemberStatus{}, fmt.Errorf("status of %s: %w", clientURL, rpctypes.ErrUserEmpty) // as the real client says it
	}
	if err := c.f.Fail["Status"]; err != nil {
		return etcd.MemberStatus{}, fmt.Errorf("status of %s: %w", clientURL, err)
	}
	if c.f.NoQuorum && !c.f.LeaderWithoutQuorum {
		st.LeaderID = 0 // without a quorum no leader is heard: members campaign
	}
	return st, nil
}

func (c *client) AuthEnabled(context.Context) (bool, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.Unreachable {
		return false, ErrUnreachable
	}
	if c.refused() {
		return false, fmt.Errorf("auth status: %w", rpctypes.ErrUserEmpty)
	}
	return c.f.AuthEnabled, nil
}

func (c *client) SetRootPassword(_ context.Context, password string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("SetRootPassword"); err != nil {
		return err
	}
	c.f.RootUser, c.f.RootPassword = true, password
	return nil
}

func (c *client) EnableAuth(context.Context) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("EnableAuth"); err != nil {
		return err
	}
	if !c.f.RootUser {
		return errors.New("etcdfake: enable auth: root user does not exist")
	}
	c.f.AuthEnabled = true
	return nil
}

func (c *client) AddLearner(_ context.Context, peerURL string) (etcd.Member, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("AddLearner"); err != nil {
		return etcd.Member{}, fmt.Errorf("add learner %s: %w", peerURL, err) // as the real client says it
	}
	m := etcd.Member{ID: uint64(len(c.f.Members)) + 0x100, PeerURLs: []string{peerURL}, IsLearner: true}
	c.f.Members = append(c.f.Members, m)
	return m, nil
}

func (c *client) PromoteLearner(_ context.Context, id uint64) error {
	return c.onMember("PromoteLearner", id, func(m *etcd.Member) { m.IsLearner = false })
}

func (c *client) RemoveMember(_ context.Context, id uint64) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("RemoveMember"); err != nil {
		return err
	}
	for i, m := range c.f.Members {
		if m.ID == id {
			c.f.Members = append(c.f.Members[:i], c.f.Members[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("etcdfake: remove member %x: no such member", id)
}

func (c *client) onMember(name string, id uint64, change func(*etcd.Member)) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call(name); err != nil {
		return err
	}
	for i := range c.f.Members {
		if c.f.Members[i].ID == id {
			change(&c.f.Members[i])
			return nil
		}
	}
	return fmt.Errorf("etcdfake: %s %x: no such member", name, id)
}

// MoveLeader hands leadership to the member target, as every member then reports.
func (c *client) MoveLeader(_ context.Context, _ string, target uint64) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("MoveLeader"); err != nil {
		return err
	}
	for url, st := range c.f.Statuses {
		st.LeaderID = target
		c.f.Statuses[url] = st
	}
	return nil
}

func (c *client) Defragment(ctx context.Context, clientURL string) error {
	c.f.mu.Lock()
	hold := c.f.Hold["Defragment"]
	if hold != nil {
		if c.f.busy == nil {
			c.f.busy = map[string]bool{}
		}
		c.f.busy[clientURL] = true
	}
	c.f.mu.Unlock()
	if hold != nil {
		defer func() {
			c.f.mu.Lock()
			delete(c.f.busy, clientURL)
			c.f.mu.Unlock()
		}()
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.locked("Defragment")
}

func (c *client) KeyspaceAt(context.Context, string, int64) (etcd.KeyspaceDigest, error) {
	return etcd.KeyspaceDigest{}, errors.New("etcdfake: keyspace digests are tested against real etcd")
}

func (c *client) DisarmNoSpace(context.Context) error { return c.locked("DisarmNoSpace") }

// DisarmCorrupt takes memberID off every status's CorruptMembers, and CORRUPT off its Alarms
// when no other member has it.
func (c *client) DisarmCorrupt(_ context.Context, memberID uint64) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if err := c.call("DisarmCorrupt"); err != nil {
		return err
	}
	for url, st := range c.f.Statuses {
		st.CorruptMembers = slices.DeleteFunc(slices.Clone(st.CorruptMembers), func(id uint64) bool { return id == memberID })
		if len(st.CorruptMembers) == 0 {
			st.Alarms = slices.DeleteFunc(slices.Clone(st.Alarms), func(a string) bool { return a == "CORRUPT" })
		}
		c.f.Statuses[url] = st
	}
	return nil
}

func (c *client) LinearizableRead(context.Context) error { return c.locked("LinearizableRead") }

func (c *client) Snapshot(context.Context, string, io.Writer) (etcd.SnapshotInfo, error) {
	return etcd.SnapshotInfo{}, errors.New("etcdfake: snapshots are tested against real etcd")
}

func (c *client) Close() error { return nil }

func (c *client) locked(name string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.call(name)
}
