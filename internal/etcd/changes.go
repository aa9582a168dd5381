package etcd

import (
	"context"
	"errors"
	"fmt"
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

var errNotYet = errors.New("not implemented yet")

// ChangeFeed is the archiver's view of the source cluster: its changes, revision by revision.
type ChangeFeed struct{}

// NewChangeFeed connects to the cluster cfg names.
func NewChangeFeed(cfg Config) (*ChangeFeed, error) { return nil, errNotYet }

// Follow watches the whole keyspace from after+1 and calls fn with whole revisions in order,
// and with progress, a revision every revision up to which has been delivered.
func (f *ChangeFeed) Follow(ctx context.Context, after int64, fn func(revs []Revision, progress int64) error) error {
	return errNotYet
}

// LeaseTTL is the TTL lease id was granted with; found is false once it is gone.
func (f *ChangeFeed) LeaseTTL(ctx context.Context, id int64) (grantedTTL int64, found bool, err error) {
	return 0, false, errNotYet
}

// Revision is the cluster's current revision, read linearizably.
func (f *ChangeFeed) Revision(ctx context.Context) (int64, error) { return 0, errNotYet }

// Close releases the connection.
func (f *ChangeFeed) Close() error { return nil }

// Replayer writes revisions into a scratch etcd.
type Replayer struct{}

// NewReplayer connects to the scratch etcd cfg names.
func NewReplayer(cfg Config) (*Replayer, error) { return nil, errNotYet }

// Revision is the scratch etcd's current revision.
func (r *Replayer) Revision(ctx context.Context) (int64, error) { return 0, errNotYet }

// HoldLeases keeps every lease of the restored base alive until Close.
func (r *Replayer) HoldLeases(ctx context.Context) error { return errNotYet }

// Apply writes rev as one txn; it fails unless the txn's revision is rev.Revision.
func (r *Replayer) Apply(ctx context.Context, rev Revision, leaseTTL map[int64]int64) error {
	return errNotYet
}

// Close stops holding the leases and releases the connection.
func (r *Replayer) Close() error { return nil }
