// Package etcd is the only place the operator speaks etcd's API. It offers the handful of
// membership and maintenance calls the reconcilers need, behind the Client interface, so that
// the decisions that use them can be tested with a small fake and the calls themselves
// against real etcd servers.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Member is one entry of etcd's member list.
type Member struct {
	ID uint64
	// Name is empty for a learner until it has started; a member of the initial cluster has
	// its name from --initial-cluster, listed before it has ever run.
	Name     string
	PeerURLs []string
	// ClientURLs are published by the member when it starts: empty until it has run once.
	ClientURLs []string
	IsLearner  bool
}

// Started says whether the member has run at least once: it has published its client URLs.
// Its name does not say it: the members of the initial cluster are listed by name from the
// start.
func (m Member) Started() bool { return len(m.ClientURLs) > 0 }

// IDString is the member ID the way etcdctl prints it.
func (m Member) IDString() string { return FormatID(m.ID) }

// FormatID renders an etcd member or cluster ID in hexadecimal, as etcdctl does.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// MemberStatus is what one member reports about itself.
type MemberStatus struct {
	MemberID uint64
	// Revision of the member's keyspace.
	Revision         int64
	LeaderID         uint64
	Version          string
	DBSizeBytes      int64
	DBSizeInUseBytes int64
	RaftIndex        uint64
	RaftAppliedIndex uint64
	RaftTerm         uint64
	IsLearner        bool
	QuotaBytes       int64
	// Errors are the member's own errors, such as having no leader.
	Errors []string
	// Alarms are the cluster's active alarms as this member reports them, such as NOSPACE.
	Alarms []string
	// CorruptMembers are the members etcd raised a CORRUPT alarm for: their data diverged from
	// the others' (etcd's compaction hash check, or an alarm raised by hand). While one is
	// raised, etcd refuses every write.
	CorruptMembers []uint64
}

// Client is the narrow view of etcd the reconcilers use.
type Client interface {
	// Members returns the cluster ID and etcd's member list: the source of truth for who is
	// in the cluster.
	Members(ctx context.Context) (clusterID uint64, members []Member, err error)
	// AddLearner adds a non-voting member that will join with peerURL. Adding a learner never
	// changes the quorum size, so it cannot cost availability.
	AddLearner(ctx context.Context, peerURL string) (Member, error)
	// PromoteLearner makes a learner a voting member. etcd refuses while the learner lags.
	PromoteLearner(ctx context.Context, id uint64) error
	// RemoveMember removes a member from the cluster.
	RemoveMember(ctx context.Context, id uint64) error
	// MoveLeader hands leadership from the leader, reached at leaderClientURL, to transferee.
	MoveLeader(ctx context.Context, leaderClientURL string, transferee uint64) error
	// Status asks the member serving clientURL about itself.
	Status(ctx context.Context, clientURL string) (MemberStatus, error)
	// AuthEnabled says whether authentication is on.
	AuthEnabled(ctx context.Context) (bool, error)
	// SetRootPassword makes password the root user's, creating the user (with the root role)
	// when it does not exist. With authentication on, clients authenticated with the old
	// password keep working only until their token is refreshed: reconnect with the new one.
	SetRootPassword(ctx context.Context, password string) error
	// EnableAuth turns authentication on; the root user must exist (SetRootPassword).
	EnableAuth(ctx context.Context) error
	// Defragment rewrites the database file of the member serving clientURL, giving back the
	// space compaction freed. The member answers nothing else meanwhile.
	Defragment(ctx context.Context, clientURL string) error
	// Snapshot streams a snapshot of the member serving clientURL into w.
	Snapshot(ctx context.Context, clientURL string, w io.Writer) (SnapshotInfo, error)
	// KeyspaceAt is the digest of the keyspace of the member serving clientURL at revision;
	// ErrCompacted once that revision is compacted away.
	KeyspaceAt(ctx context.Context, clientURL string, revision int64) (KeyspaceDigest, error)
	// DisarmNoSpace clears the NOSPACE alarm of every member, letting writes through again.
	DisarmNoSpace(ctx context.Context) error
	// DisarmCorrupt clears the CORRUPT alarm raised for memberID (which may have been removed
	// since), letting writes through again once no other is raised.
	DisarmCorrupt(ctx context.Context, memberID uint64) error
	// LinearizableRead reads a key as clients read by default: through the raft log, answered
	// only once a leader is known and the member has applied what it committed.
	LinearizableRead(ctx context.Context) error
	// Close releases the connections.
	Close() error
}

// Config says how to reach a cluster.
type Config struct {
	Endpoints []string
	TLS       *tls.Config
	Username  string
	Password  string
	// Fingerprint identifies the TLS material and credentials: the cache reconnects when it
	// changes (a renewed client certificate), not on every reconcile's fresh tls.Config.
	Fingerprint string
}

// callTimeout bounds every single call: a member that does not answer within it is treated as
// unhealthy rather than stalling the reconcile.
const callTimeout = 5 * time.Second

type client struct {
	c *clientv3.Client

	// memberConns are the connections to one member each that the calls about a member go over
	// (Status, KeyspaceAt), by client URL. clientv3 dials the member anew for each such call: a
	// DNS lookup and a TCP, HTTP/2 and, with TLS, a TLS handshake, for the operator and the
	// member, on every look at every cluster — nearly half of an idle operator's CPU with a hundred
	// clusters on a node (profiled). Kept for the client's life: a cached client is replaced
	// when the members or the credentials change, so these are its members'. A member that
	// restarts is reconnected to like the client's own connection (reconnectBackoff).
	mu          sync.Mutex
	memberConns map[string]*grpc.ClientConn
}

// New connects to the cluster. It does not wait for any endpoint to answer: calls fail on
// their own when none does.
func New(cfg Config) (Client, error) {
	c, err := dial(cfg, 0)
	if err != nil {
		return nil, err
	}
	return &client{c: c, memberConns: map[string]*grpc.ClientConn{}}, nil
}

// memberConn is the kept connection to the member serving clientURL, dialled on first use.
// Dialling does not wait for the member: a call over it fails on its own when it does not answer.
// A client of that member alone (a one-member cluster) has it already: its own connection
// reaches no other member.
func (e *client) memberConn(clientURL string) (*grpc.ClientConn, error) {
	if endpoints := e.c.Endpoints(); len(endpoints) == 1 && endpoints[0] == clientURL {
		return e.c.ActiveConnection(), nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if conn, ok := e.memberConns[clientURL]; ok {
		return conn, nil
	}
	conn, err := e.c.Dial(clientURL)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", clientURL, err)
	}
	e.memberConns[clientURL] = conn
	return conn, nil
}

// memberMaintenance is clientv3's maintenance API over the kept connection to one member, with
// clientv3's retries of its calls.
func (e *client) memberMaintenance(clientURL string) (clientv3.Maintenance, error) {
	conn, err := e.memberConn(clientURL)
	if err != nil {
		return nil, err
	}
	return clientv3.NewMaintenanceFromMaintenanceClient(clientv3.RetryMaintenanceClient(e.c, conn), e.c), nil
}

// reconnectBackoff spaces a cached client's attempts to reconnect to a member that went away:
// gRPC's default (1 s, ×1.6, up to 2 min) left twenty restarted members' clusters unreported for
// ~17 s after their pods were Ready (BenchmarkClustersOnOneNode). Every attempt is one dial to
// one member, so a 3-second ceiling costs nothing worth saving.
var reconnectBackoff = backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}

// receiveWindow is how much a member may send on a connection, and on each stream, before what
// was sent is read: a snapshot held in the agent's memory while its writer is slowed (a disk's
// write-back, an upload) is at most this. gRPC's default window grows with the bandwidth-delay
// product it measures, up to 16 MiB, so a backup's memory grew with the time it ran (a 1 GiB
// snapshot to a directory, 6–15 MiB more than a 64 MiB one). A fixed window bounds a stream's
// rate to it per round trip: 1 MiB carries 500 MB/s at 2 ms, past what etcd sends a snapshot at
// (150–250 MB/s on this project's machines), and 100 MB/s at 10 ms, as across regions.
const receiveWindow = 1 << 20

// dial is the clientv3 client every connection of the package uses; maxRequestBytes above 0
// lifts clientv3's own 2 MiB limit on what one request may send.
func dial(cfg Config, maxRequestBytes int) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		TLS:                  cfg.TLS,
		Username:             cfg.Username,
		Password:             cfg.Password,
		DialTimeout:          callTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: callTimeout,
		// The manager logs through logr; clientv3's own zap logs are noise at info level.
		Logger: zap.NewNop(),
		// Every member is in the cluster, and gRPC would otherwise take the HTTPS_PROXY that OLM
		// gives the operator and its Jobs for any member address NO_PROXY misses (a pod IP, a
		// cluster domain the user did not list): a proxy that cannot reach the member, or one
		// that should never carry etcd's traffic.
		// A member that was down is tried again at most reconnectBackoff.MaxDelay after it is
		// back, not at the end of gRPC's default exponential wait (up to 2 minutes).
		// What a member may send ahead of what is read is a fixed window (receiveWindow).
		DialOptions: []grpc.DialOption{grpc.WithNoProxy(), grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: callTimeout}),
			grpc.WithInitialWindowSize(receiveWindow), grpc.WithInitialConnWindowSize(receiveWindow)},
		MaxCallSendMsgSize: maxRequestBytes,
	})
	if errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed) {
		return nil, fmt.Errorf("connect to etcd %v as %s: %w", cfg.Endpoints, cfg.Username, ErrAuthFailed)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
	}
	return c, nil
}

func (e *client) Members(ctx context.Context) (uint64, []Member, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := e.c.MemberList(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("list members: %w", err)
	}
	members := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		members = append(members, fromProto(m))
	}
	return resp.Header.ClusterId, members, nil
}

func (e *client) AddLearner(ctx context.Context, peerURL string) (Member, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := e.c.MemberAddAsLearner(ctx, []string{peerURL})
	if err != nil {
		return Member{}, fmt.Errorf("add learner %s: %w", peerURL, err)
	}
	// gofail: var learnerAdded struct{}
	return fromProto(resp.Member), nil
}

// ErrAuthFailed is returned by New when etcd refuses the user name and password.
var ErrAuthFailed = errors.New("etcd refused the user name and password")

// RefusedTheUser says whether etcd refused a call for the user that made it, or for making it
// with no user (authentication enabled): asking again as the same client will not change it.
func RefusedTheUser(err error) bool {
	for _, refusal := range []error{rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed, rpctypes.ErrUserNotFound,
		rpctypes.ErrPermissionDenied, rpctypes.ErrInvalidAuthToken, rpctypes.ErrInvalidAuthMgmt} {
		if errors.Is(err, refusal) || errors.Is(rpctypes.Error(errors.Unwrap(err)), refusal) {
			return true
		}
	}
	return errors.Is(err, ErrAuthFailed)
}

// ErrLearnerNotReady is returned by PromoteLearner while the learner has not caught up.
var ErrLearnerNotReady = errors.New("learner has not caught up with the leader yet")

func (e *client) PromoteLearner(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := e.c.MemberPromote(ctx, id); err != nil {
		if errors.Is(rpctypes.Error(err), rpctypes.ErrMemberLearnerNotReady) {
			return ErrLearnerNotReady
		}
		return fmt.Errorf("promote learner %s: %w", FormatID(id), err)
	}
	// gofail: var learnerPromoted struct{}
	return nil
}

func (e *client) RemoveMember(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := e.c.MemberRemove(ctx, id); err != nil {
		if errors.Is(rpctypes.Error(err), rpctypes.ErrMemberNotFound) {
			return nil // already gone: removal is idempotent
		}
		return fmt.Errorf("remove member %s: %w", FormatID(id), err)
	}
	// gofail: var memberRemoved struct{}
	return nil
}

func (e *client) MoveLeader(ctx context.Context, leaderClientURL string, transferee uint64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// etcd only accepts MoveLeader on the leader itself, so the request goes straight to it
	// rather than through the balanced connection.
	conn, err := e.c.Dial(leaderClientURL)
	if err != nil {
		return fmt.Errorf("dial leader %s: %w", leaderClientURL, err)
	}
	defer conn.Close()
	m := clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), e.c)
	if _, err := m.MoveLeader(ctx, transferee); err != nil {
		return fmt.Errorf("move leadership to %s: %w", FormatID(transferee), err)
	}
	// gofail: var leaderMoved struct{}
	return nil
}

func (e *client) Status(ctx context.Context, clientURL string) (MemberStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	m, err := e.memberMaintenance(clientURL)
	if err != nil {
		return MemberStatus{}, fmt.Errorf("status of %s: %w", clientURL, err)
	}
	resp, err := m.Status(ctx, clientURL)
	if err != nil {
		return MemberStatus{}, fmt.Errorf("status of %s: %w", clientURL, err)
	}
	st := MemberStatus{
		MemberID:         resp.Header.MemberId,
		Revision:         resp.Header.Revision,
		LeaderID:         resp.Leader,
		Version:          resp.Version,
		DBSizeBytes:      resp.DbSize,
		DBSizeInUseBytes: resp.DbSizeInUse,
		RaftIndex:        resp.RaftIndex,
		RaftAppliedIndex: resp.RaftAppliedIndex,
		RaftTerm:         resp.RaftTerm,
		IsLearner:        resp.IsLearner,
		QuotaBytes:       resp.DbSizeQuota,
	}
	for _, e := range resp.Errors {
		// etcd reports alarms as "memberID:<id> alarm:<TYPE>", the ID in decimal.
		member, alarm, ok := strings.Cut(e, "alarm:")
		if !ok {
			st.Errors = append(st.Errors, e)
			continue
		}
		alarm = strings.TrimSpace(alarm)
		st.Alarms = append(st.Alarms, alarm)
		if alarm != pb.AlarmType_CORRUPT.String() {
			continue
		}
		if id, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(member), "memberID:")), 10, 64); err == nil {
			st.CorruptMembers = append(st.CorruptMembers, id)
		}
	}
	return st, nil
}

func (e *client) AuthEnabled(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := e.c.AuthStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("auth status: %w", err)
	}
	return resp.Enabled, nil
}

func (e *client) SetRootPassword(ctx context.Context, password string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := e.c.UserAdd(ctx, "root", password)
	// Left by an interrupted attempt, or its password is being changed.
	exists := errors.Is(rpctypes.Error(err), rpctypes.ErrUserAlreadyExist)
	if err != nil && !exists {
		return fmt.Errorf("add root user: %w", err)
	}
	// Granted before the password changes: with authentication on, the change voids this
	// client's token, and it could not authenticate again with the old password.
	if _, err := e.c.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("grant root role: %w", err)
	}
	if exists {
		if _, err := e.c.UserChangePassword(ctx, "root", password); err != nil {
			return fmt.Errorf("change the root user's password: %w", err)
		}
	}
	// gofail: var rootPasswordSet struct{}
	return nil
}

func (e *client) EnableAuth(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := e.c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	// gofail: var authEnabled struct{}
	return nil
}

// defragmentTimeout is far above callTimeout: defragmentation rewrites the whole database file.
const defragmentTimeout = 5 * time.Minute

func (e *client) Defragment(ctx context.Context, clientURL string) error {
	ctx, cancel := context.WithTimeout(ctx, defragmentTimeout)
	defer cancel()
	if _, err := e.c.Defragment(ctx, clientURL); err != nil {
		return fmt.Errorf("defragment %s: %w", clientURL, err)
	}
	return nil
}

// linearizableReadKey is the key LinearizableRead reads, as etcdctl endpoint health does: its
// value, or its absence, does not matter.
const linearizableReadKey = "health"

func (e *client) LinearizableRead(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := e.c.Get(ctx, linearizableReadKey, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("linearizable read: %w", err)
	}
	return nil
}

func (e *client) DisarmNoSpace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	alarms, err := e.c.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("list alarms: %w", err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if _, err := e.c.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			return fmt.Errorf("disarm NOSPACE of member %s: %w", FormatID(a.MemberID), err)
		}
	}
	return nil
}

func (e *client) DisarmCorrupt(ctx context.Context, memberID uint64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	alarm := &clientv3.AlarmMember{MemberID: memberID, Alarm: pb.AlarmType_CORRUPT}
	if _, err := e.c.AlarmDisarm(ctx, alarm); err != nil {
		return fmt.Errorf("disarm CORRUPT of member %s: %w", FormatID(memberID), err)
	}
	return nil
}

func (e *client) Close() error {
	e.mu.Lock()
	for url, conn := range e.memberConns {
		_ = conn.Close()
		delete(e.memberConns, url)
	}
	e.mu.Unlock()
	return e.c.Close()
}

func fromProto(m *pb.Member) Member {
	return Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}
