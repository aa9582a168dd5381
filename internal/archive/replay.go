package archive

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// ErrUnreplayable is a plan the scratch etcd or the archive cannot carry out however often it
// is tried: the restored base is not at the revision planned, or the segments do not hold
// the revisions the listing promised.
var ErrUnreplayable = errors.New("the plan cannot be replayed")

// Replay writes p's revisions into the scratch etcd r, in which p's base has been restored:
// every revision after the base through p.Revision, each as the one txn it was, stopping
// exactly there. The scratch etcd must be at the base's revision when it starts (a base that
// restored to another would shift every revision replayed on it), and each revision must come
// out with its own number (Replayer.Apply checks it): what the scratch etcd then holds is the
// keyspace at p.Revision. The base's leases are held from the start: one expiring would delete
// its keys in a revision of its own.
func Replay(ctx context.Context, r *etcd.Replayer, open func(SegmentInfo) (io.ReadCloser, error), p Plan) error {
	at, err := r.Revision(ctx)
	if err != nil {
		return fmt.Errorf("the scratch etcd's revision: %w", err)
	}
	if at != p.Base.Revision {
		return fmt.Errorf("%w: base %s restored to revision %d, not the %d planned from", ErrUnreplayable, p.Base.Key, at, p.Base.Revision)
	}
	if err := r.HoldLeases(ctx); err != nil {
		return fmt.Errorf("hold the base's leases: %w", err)
	}
	applied := p.Base.Revision
	for _, s := range p.Segments {
		if applied >= p.Revision {
			break
		}
		if applied, err = replaySegment(ctx, r, open, s, applied, p.Revision); err != nil {
			return err
		}
	}
	if applied != p.Revision {
		return fmt.Errorf("%w: the planned segments end at revision %d, before %d", ErrUnreplayable, applied, p.Revision)
	}
	return nil
}

// replaySegment applies the revisions of s after applied through target, and returns the last
// one applied. A revision s lacks on the way is the archive not holding what its listing
// promised.
func replaySegment(ctx context.Context, r *etcd.Replayer, open func(SegmentInfo) (io.ReadCloser, error), s SegmentInfo, applied, target int64) (int64, error) {
	seg, err := readSegment(s, open)
	if err != nil {
		return applied, err
	}
	ttl := seg.LeaseTTL // a lease it does not know (0) the replayer grants for a minute
	for _, rec := range seg.Records {
		rev := rec.Revision.Revision
		if rev <= applied {
			continue
		}
		if rev > target {
			break
		}
		if rev != applied+1 {
			return applied, fmt.Errorf("%w: segment %s goes from revision %d to %d", ErrUnreplayable, s.Key, applied, rev)
		}
		if err := r.Apply(ctx, rec.Revision, ttl); err != nil {
			return applied, fmt.Errorf("replay revision %d of segment %s: %w", rev, s.Key, err)
		}
		applied = rev
	}
	return applied, nil
}
