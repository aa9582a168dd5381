package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one key's change in a revision, as etcd's watch reports it.
type Event struct {
	Delete bool
	// Value is nil for a delete.
	Key, Value                           []byte
	CreateRevision, ModRevision, Version int64
	// Lease is 0 for a key without a lease.
	Lease int64
}

// Revision is one committed txn: every event etcd's watch gave with that revision, in order.
type Revision struct {
	Revision int64
	Events   []Event
}

// CompactedError is a revision asked for that etcd has compacted away; CompactRevision is
// etcd's compaction revision then.
type CompactedError struct{ CompactRevision int64 }

func (e *CompactedError) Error() string {
	return fmt.Sprintf("the revisions up to %d have been compacted away", e.CompactRevision)
}

// idleProgressInterval is how long Follow lets a watch go without events before it asks etcd
// for a progress notification: etcd sends them unasked only every ten minutes, and a segment
// of a quiet cluster can close only once etcd has said no revision is still to come.
const idleProgressInterval = 2 * time.Second

// resumeDelay is how long Follow waits before watching again after etcd ended a watch (its
// member lost the leader, or went away): long enough not to spin, short enough to keep up.
const resumeDelay = time.Second

// ChangeFeed is the archiver's view of the source cluster: its changes, revision by revision.
type ChangeFeed struct {
	c *clientv3.Client
}

// NewChangeFeed connects to the cluster cfg names. It does not wait for any endpoint to
// answer.
func NewChangeFeed(cfg Config) (*ChangeFeed, error) {
	c, err := dial(cfg, 0)
	if err != nil {
		return nil, err
	}
	return &ChangeFeed{c: c}, nil
}

// Follow watches the whole keyspace from after+1 and calls fn with whole revisions in order,
// and with progress, a revision every revision up to which has been delivered (so a segment
// can close at it on a quiet cluster). On a quiet cluster fn is called every few seconds with
// no revisions, progress perhaps unchanged. Follow returns *CompactedError when a revision it
// still has to deliver is compacted away, fn's error when fn fails, ctx.Err() when cancelled.
// A watch etcd ends (a member without a leader, a member gone) is watched again from the last
// delivered revision, so fn never sees a revision twice nor misses one.
func (f *ChangeFeed) Follow(ctx context.Context, after int64, fn func(revs []Revision, progress int64) error) error {
	delivered := after
	for {
		err := f.watch(ctx, &delivered, fn)
		var compacted *CompactedError
		var stopped callbackError
		var broken brokenFeedError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &compacted):
			return compacted
		case errors.As(err, &stopped):
			return stopped.error
		case errors.As(err, &broken):
			return broken
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resumeDelay):
		}
	}
}

// callbackError is fn's own error, which ends Follow rather than resuming the watch.
type callbackError struct{ error }

func (e callbackError) Unwrap() error { return e.error }

// brokenFeedError is a watch response that breaks what Follow relies on (whole revisions, each
// following the last): resuming would only write a wrong archive.
type brokenFeedError struct{ error }

func (e brokenFeedError) Unwrap() error { return e.error }

// watch runs one etcd watch until it ends, advancing *delivered as fn accepts what it is given.
//
// It starts at the last delivered revision, not the one after, which it drops: etcd answers a
// progress request only once every watcher of the stream has reached its start revision
// (progressIfSync in server/storage/mvcc/watchable_store.go), so a watch of a quiet cluster
// from its next revision would never learn that nothing newer exists. It is also what makes a
// compaction at exactly the revision after the last delivered one a CompactedError: etcd lets
// a watch start at the compaction revision itself, whose deletes the compaction dropped.
func (f *ChangeFeed) watch(ctx context.Context, delivered *int64, fn func([]Revision, int64) error) error {
	// WithRequireLeader: a member cut off from its leader ends the watch rather than silently
	// sending nothing, and the next watch finds a member that has one.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// No WithFragment: etcd then sends a revision's events in one response. Its watchable
	// store cuts a catching-up watcher's batch only between revisions (eventBatch.add in
	// server/storage/mvcc/watcher_group.go: a batch holds at most watchBatchMaxRevs whole
	// revisions), and a synced watcher gets each txn's events in one notify call
	// (watchableStore.notify, from watchableStoreTxnWrite.End); only WithFragment would split
	// a response. revisionsOf still checks it.
	start := max(*delivered, 1) // 0 would mean "from now"
	ch := f.c.Watch(wctx, "", clientv3.WithFromKey(), clientv3.WithRev(start), clientv3.WithProgressNotify())
	idle := time.NewTicker(idleProgressInterval)
	defer idle.Stop()
	sawEvents := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-idle.C:
			if !sawEvents {
				// An error here is the watch stream's, which its channel reports.
				_ = f.c.RequestProgress(wctx)
			}
			sawEvents = false
		case resp, ok := <-ch:
			if !ok {
				return errors.New("the watch ended")
			}
			if resp.CompactRevision != 0 {
				return &CompactedError{CompactRevision: resp.CompactRevision}
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("watch from revision %d: %w", start, err)
			}
			sawEvents = sawEvents || len(resp.Events) > 0
			revs, progress, ok, err := revisionsOf(resp, *delivered, start)
			if err != nil {
				return brokenFeedError{err}
			}
			if !ok {
				continue
			}
			if err := fn(revs, progress); err != nil {
				return callbackError{err}
			}
			*delivered = progress
		}
	}
}

// revisionsOf is what one watch response delivers after revision delivered: its events as
// whole revisions, and the revision up to which every one has been delivered. For events that
// is the last event's revision, never the header's: a catching-up watcher's batch carries the
// store's current revision in its header while stopping short of it. A progress notification's
// header is the revision up to which etcd has sent the watcher every event: etcd sends one only
// once the watcher is synced, after the events before it in the same stream. ok is false for
// a response that delivers nothing new (the watch's creation, the revision already delivered).
// start is the watch's start revision: while it is the last delivered, its events are that
// revision read again and dropped; any other event at or before the last delivered revision is
// a revision split between responses.
func revisionsOf(resp clientv3.WatchResponse, delivered, start int64) (revs []Revision, progress int64, ok bool, err error) {
	if resp.IsProgressNotify() {
		return nil, max(resp.Header.Revision, delivered), true, nil
	}
	last := delivered
	for _, ev := range resp.Events {
		rev := ev.Kv.ModRevision
		switch {
		case rev == start && start == delivered:
			continue
		case rev <= delivered:
			return nil, 0, false, fmt.Errorf("the watch gave revision %d again after delivering it whole", rev)
		case rev == last && len(revs) > 0:
			revs[len(revs)-1].Events = append(revs[len(revs)-1].Events, eventOf(ev))
			continue
		case rev != last+1:
			return nil, 0, false, fmt.Errorf("the watch gave revision %d after revision %d: etcd's revisions follow one another, and a revision is never split between responses", rev, last)
		}
		revs = append(revs, Revision{Revision: rev, Events: []Event{eventOf(ev)}})
		last = rev
	}
	return revs, last, len(revs) > 0, nil
}

func eventOf(ev *clientv3.Event) Event {
	kv := ev.Kv
	if ev.Type == mvccpb.DELETE {
		return Event{Delete: true, Key: kv.Key, ModRevision: kv.ModRevision}
	}
	// A put of an empty value is still a put: its value is an empty slice, never nil.
	value := kv.Value
	if value == nil {
		value = []byte{}
	}
	return Event{Key: kv.Key, Value: value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

// LeaseTTL is the TTL lease id was granted with; found is false once it is gone (revoked or
// expired).
func (f *ChangeFeed) LeaseTTL(ctx context.Context, id int64) (grantedTTL int64, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := f.c.TimeToLive(ctx, clientv3.LeaseID(id))
	if errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("time to live of lease %x: %w", id, err)
	}
	// etcd answers a lease it does not hold with TTL -1 rather than an error.
	if resp.TTL < 0 {
		return 0, false, nil
	}
	return resp.GrantedTTL, true, nil
}

// Revision is the cluster's current revision, read linearizably.
func (f *ChangeFeed) Revision(ctx context.Context) (int64, error) { return currentRevision(ctx, f.c) }

// Close releases the connection.
func (f *ChangeFeed) Close() error { return f.c.Close() }

func currentRevision(ctx context.Context, c *clientv3.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.Get(ctx, linearizableReadKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read the current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// unknownLeaseTTL is the TTL Apply grants a lease whose TTL the archive does not know (0: it
// was gone when the archiver asked): a restore's leases restart their TTL anyway, and such a
// lease's keys are deleted by a later revision of the archive or, past its end, expire a
// minute after the restored cluster starts.
const unknownLeaseTTL = 60

// maxReplayRequestBytes lifts clientv3's 2 MiB limit on a request: one revision replays as
// one txn, as large as the source's largest (and a lease revocation's deletes, which are one
// small request at the source, are a delete per key here). The scratch etcd must accept it:
// run it with --max-request-bytes and --max-txn-ops above the source's.
const maxReplayRequestBytes = 1 << 30

// Replayer writes revisions into a scratch etcd.
type Replayer struct {
	c *clientv3.Client
	// holding keeps the leases alive until Close; held is the leases it holds.
	holding     context.Context
	stopHolding context.CancelFunc
	mu          sync.Mutex
	held        map[int64]bool
}

// NewReplayer connects to the scratch etcd cfg names.
func NewReplayer(cfg Config) (*Replayer, error) {
	c, err := dial(cfg, maxReplayRequestBytes)
	if err != nil {
		return nil, err
	}
	holding, stop := context.WithCancel(context.Background())
	return &Replayer{c: c, holding: holding, stopHolding: stop, held: map[int64]bool{}}, nil
}

// Revision is the scratch etcd's current revision.
func (r *Replayer) Revision(ctx context.Context) (int64, error) { return currentRevision(ctx, r.c) }

// HoldLeases keeps every lease of the restored base alive until Close: a lease expiring
// during the replay would delete its keys in a revision of its own and shift every later one.
func (r *Replayer) HoldLeases(ctx context.Context) error {
	resp, err := r.c.Leases(ctx)
	if err != nil {
		return fmt.Errorf("list the leases: %w", err)
	}
	for _, l := range resp.Leases {
		if err := r.hold(int64(l.ID)); err != nil {
			return err
		}
	}
	return nil
}

// hold keeps lease id alive until Close.
func (r *Replayer) hold(id int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held[id] {
		return nil
	}
	ch, err := r.c.KeepAlive(r.holding, clientv3.LeaseID(id))
	if err != nil {
		return fmt.Errorf("keep lease %x alive: %w", id, err)
	}
	// clientv3 warns about answers nobody reads; nothing here needs them.
	go func() {
		for range ch {
		}
	}()
	r.held[id] = true
	return nil
}

func (r *Replayer) holds(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[id]
}

// Apply writes rev as one txn (puts with their lease, deletes of single keys), first granting,
// with their id and TTL, the leases it names that the scratch etcd lacks (and holding them);
// it fails unless the txn's revision is rev.Revision, which it is only when the scratch etcd
// holds the keyspace of rev.Revision-1.
func (r *Replayer) Apply(ctx context.Context, rev Revision, leaseTTL map[int64]int64) error {
	for _, id := range leasesOf(rev) {
		if err := r.grant(ctx, id, leaseTTL[id]); err != nil {
			return fmt.Errorf("revision %d: %w", rev.Revision, err)
		}
	}
	ops, err := r.opsOf(ctx, rev)
	if err != nil {
		return err
	}
	resp, err := r.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("apply revision %d: %w", rev.Revision, err)
	}
	if resp.Header.Revision != rev.Revision {
		return fmt.Errorf("revision %d was applied as revision %d: the scratch etcd did not hold the keyspace of revision %d", rev.Revision, resp.Header.Revision, rev.Revision-1)
	}
	return nil
}

// leasesOf lists the leases rev's puts name, once each.
func leasesOf(rev Revision) []int64 {
	var ids []int64
	seen := map[int64]bool{}
	for _, ev := range rev.Events {
		if ev.Lease != 0 && !seen[ev.Lease] {
			seen[ev.Lease] = true
			ids = append(ids, ev.Lease)
		}
	}
	return ids
}

// grant makes lease id exist with ttl (0: unknown) and holds it. clientv3's Grant picks the
// id itself; the raw request takes the source's, which the replayed puts name.
func (r *Replayer) grant(ctx context.Context, id, ttl int64) error {
	if r.holds(id) {
		return nil
	}
	if ttl <= 0 {
		ttl = unknownLeaseTTL
	}
	_, err := clientv3.RetryLeaseClient(r.c).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: ttl})
	if err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseExist) {
		return fmt.Errorf("grant lease %x: %w", id, err)
	}
	return r.hold(id)
}

// opsOf is rev as txn operations. A run of deletes of ascending keys (a range delete, or a
// lease's keys, which etcd deletes in key order) becomes one range delete when the scratch
// etcd holds no other key in that range and the revision puts none there: the same revision,
// in one operation rather than one per key, which keeps a large range delete within the
// scratch etcd's limits.
func (r *Replayer) opsOf(ctx context.Context, rev Revision) ([]clientv3.Op, error) {
	var ops []clientv3.Op
	events := rev.Events
	for len(events) > 0 {
		if !events[0].Delete {
			ops = append(ops, putOf(events[0]))
			events = events[1:]
			continue
		}
		run := ascendingDeletes(events)
		deletes, err := r.deletesOf(ctx, run, rev.Events)
		if err != nil {
			return nil, fmt.Errorf("revision %d: %w", rev.Revision, err)
		}
		ops = append(ops, deletes...)
		events = events[len(run):]
	}
	return ops, nil
}

func putOf(ev Event) clientv3.Op {
	if ev.Lease != 0 {
		return clientv3.OpPut(string(ev.Key), string(ev.Value), clientv3.WithLease(clientv3.LeaseID(ev.Lease)))
	}
	return clientv3.OpPut(string(ev.Key), string(ev.Value))
}

// ascendingDeletes is the longest run of deletes at the head of events whose keys ascend.
func ascendingDeletes(events []Event) []Event {
	n := 1
	for n < len(events) && events[n].Delete && bytes.Compare(events[n-1].Key, events[n].Key) < 0 {
		n++
	}
	return events[:n]
}

// deletesOf deletes the keys of run: one range delete when the range from its first to its
// last key holds nothing else, a delete per key otherwise. etcd refuses a txn that puts a key
// inside a range it deletes, so a range around one of the revision's puts is never taken.
func (r *Replayer) deletesOf(ctx context.Context, run, revision []Event) ([]clientv3.Op, error) {
	if len(run) > 1 && !putsWithin(revision, run[0].Key, run[len(run)-1].Key) {
		first, end := string(run[0].Key), string(run[len(run)-1].Key)+"\x00"
		resp, err := r.c.Get(ctx, first, clientv3.WithRange(end), clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("count the keys a run of deletes spans: %w", err)
		}
		if resp.Count == int64(len(run)) {
			return []clientv3.Op{clientv3.OpDelete(first, clientv3.WithRange(end))}, nil
		}
	}
	ops := make([]clientv3.Op, len(run))
	for i, ev := range run {
		ops[i] = clientv3.OpDelete(string(ev.Key))
	}
	return ops, nil
}

// putsWithin says whether any of events puts a key from first to last.
func putsWithin(events []Event, first, last []byte) bool {
	for _, ev := range events {
		if !ev.Delete && bytes.Compare(ev.Key, first) >= 0 && bytes.Compare(ev.Key, last) <= 0 {
			return true
		}
	}
	return false
}

// Close stops holding the leases and releases the connection.
func (r *Replayer) Close() error {
	r.stopHolding()
	return r.c.Close()
}
