package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// The archiver follows every revision of the cluster and writes it, in segments, beside the
// series' full snapshots (see internal/archive for the layout). Its invariants:
//   - a lineage's segments hold every revision after its base snapshot's, each once, in order
//     (etcd.ChangeFeed delivers them so; a segment is written whole, verified, and only then
//     are its revisions dropped from memory);
//   - a lineage is continued only by the archiver of the same cluster (its ID) with the same
//     restore mark, from its last written revision; anything else (compaction overtook the
//     archiver, the cluster restored in place or made again) starts a new lineage from a
//     full snapshot of the cluster's current history, and reports the gap;
//   - a segment is deleted only when no base left can use it.

// ArchiveConfig is one archiver.
type ArchiveConfig struct {
	Etcd etcd.Config
	// Series is the EtcdBackup whose directory the archive is written into.
	Series      backupplan.Series
	Destination *storage.Destination
	// Keys, when set, encrypt the segments (and the snapshots the archiver takes) to their
	// newest key.
	Keys *encryption.Keyring
	// SegmentDuration and SegmentMaxBytes close a segment: once its first revision has waited
	// that long, or its changes reach that size before compression.
	SegmentDuration time.Duration
	SegmentMaxBytes int64
	// RestoreMark changes when the cluster is restored in place: a lineage of another mark is
	// another history.
	RestoreMark string
	// SkipMembers are members found corrupt (hexadecimal IDs): never a snapshot's source.
	SkipMembers []string
	Now         func() time.Time
	Log         *slog.Logger
}

// Defaults for a configuration that leaves them out (the API defaults them too).
const (
	defaultSegmentDuration = time.Minute
	defaultSegmentMaxBytes = 16 << 20
)

// housekeepingInterval is how often the archiver lists the series to prune segments and to
// report the recoverable ranges: the scheduled snapshots that make older segments useless
// come at most every few minutes.
var housekeepingInterval = 5 * time.Minute

// archiveRetryDelay is the wait before trying again whatever failed: etcd or the destination
// away for a moment.
const archiveRetryDelay = 5 * time.Second

// flushTimeout bounds the write of what is pending when the archiver is stopped: the pod's
// grace period is 30 seconds.
const flushTimeout = 20 * time.Second

// Archiver writes the continuous archive of one cluster.
type Archiver struct {
	cfg    ArchiveConfig
	dir    string
	feed   *etcd.ChangeFeed
	cl     etcd.Client
	status *archiveBoard

	lin *lineageRun
	// abandoned are lineages compaction overtook: never continued again.
	abandoned map[string]bool
	// gap is the break a new lineage is about to close, reported once it has its base.
	gap *ArchiveGap
	// The series as last listed, kept up to date with what the archiver writes.
	listing       seriesListing
	lastHousekept time.Time
}

// lineageRun is the lineage being written.
type lineageRun struct {
	name   string
	record archive.Lineage
	// delivered is the last revision received; written the last in a written segment.
	delivered, written int64
	pending            []archive.Record
	pendingBytes       int
	leases             leaseTTLs
}

// NewArchiver connects to the cluster; Run archives it.
func NewArchiver(cfg ArchiveConfig) (*Archiver, error) {
	if err := cfg.Series.Validate(); err != nil {
		return nil, permanentError{err}
	}
	if cfg.SegmentDuration <= 0 {
		cfg.SegmentDuration = defaultSegmentDuration
	}
	if cfg.SegmentMaxBytes <= 0 {
		cfg.SegmentMaxBytes = defaultSegmentMaxBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	feed, err := etcd.NewChangeFeed(cfg.Etcd)
	if err != nil {
		return nil, err
	}
	cl, err := etcd.New(cfg.Etcd)
	if err != nil {
		_ = feed.Close()
		return nil, err
	}
	return &Archiver{
		cfg: cfg, dir: cfg.Series.Dir(cfg.Destination.Prefix()), feed: feed, cl: cl,
		status: newArchiveBoard(cfg.Now), abandoned: map[string]bool{},
	}, nil
}

// Close releases the connections.
func (a *Archiver) Close() error {
	return errors.Join(a.feed.Close(), a.cl.Close())
}

// Status is what the archiver reports now.
func (a *Archiver) Status() ArchiveStatus { return a.status.report() }

// Run archives until ctx ends, writing what it holds before it returns. It never gives up:
// every failure is reported (Status().Error, the log) and tried again.
func (a *Archiver) Run(ctx context.Context) {
	go a.trackHighestRevision(ctx)
	for ctx.Err() == nil {
		err := a.archive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue // a lineage ended: the next one starts at once
		}
		a.status.failed(err)
		a.cfg.Log.Error("archive", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(archiveRetryDelay):
		}
	}
}

// archive continues or starts a lineage and follows the cluster into it until something
// fails. A compaction that overtook it ends the lineage: the next call starts another.
func (a *Archiver) archive(ctx context.Context) error {
	if a.lin == nil {
		if err := a.begin(ctx); err != nil {
			return err
		}
	}
	err := a.feed.Follow(ctx, a.lin.delivered, a.receive(ctx))
	if flushErr := a.flush(ctx); flushErr != nil {
		return errors.Join(err, flushErr)
	}
	var compacted *etcd.CompactedError
	if errors.As(err, &compacted) {
		a.endLineage(compacted)
		return nil
	}
	return err
}

// receive takes what the feed delivers: records the revisions, writes a segment when one is
// due, and keeps the series tidy now and then.
func (a *Archiver) receive(ctx context.Context) func([]etcd.Revision, int64) error {
	return func(revs []etcd.Revision, progress int64) error {
		now := a.cfg.Now()
		for _, rev := range revs {
			if err := a.record(ctx, rev, now); err != nil {
				return err
			}
			// Per revision: a failure on the next one resumes the feed after this one.
			a.lin.delivered = rev.Revision
			// Also within a batch: catching up, etcd sends a thousand revisions at once.
			if err := a.writeSegmentIfDue(ctx, now); err != nil {
				return err
			}
		}
		a.lin.delivered = max(a.lin.delivered, progress)
		a.status.progressed(progress, a.oldestPending())
		if err := a.writeSegmentIfDue(ctx, now); err != nil {
			return err
		}
		if now.Sub(a.lastHousekept) >= housekeepingInterval {
			a.housekeep(ctx)
		}
		return nil
	}
}

func (a *Archiver) writeSegmentIfDue(ctx context.Context, now time.Time) error {
	if len(a.lin.pending) == 0 || !segmentDue(a.lin.pendingBytes, a.lin.pending[0].Seen, now, a.cfg.SegmentMaxBytes, a.cfg.SegmentDuration) {
		return nil
	}
	return a.writeSegment(ctx)
}

// segmentDue says whether the pending revisions make a segment now: their changes reached
// maxBytes, or the first of them has waited duration. Every delivered revision is whole, so
// any moment is a revision boundary.
func segmentDue(pendingBytes int, firstSeen, now time.Time, maxBytes int64, duration time.Duration) bool {
	return int64(pendingBytes) >= maxBytes || now.Sub(firstSeen) >= duration
}

// record adds rev to the pending segment, with the TTL of every lease it names.
func (a *Archiver) record(ctx context.Context, rev etcd.Revision, seen time.Time) error {
	for _, ev := range rev.Events {
		if ev.Lease != 0 {
			if err := a.lin.leases.note(ctx, a.feed, ev.Lease); err != nil {
				return err
			}
		}
	}
	rec := archive.Record{Revision: rev, Seen: seen}
	a.lin.pending = append(a.lin.pending, rec)
	a.lin.pendingBytes += rec.Size()
	return nil
}

func (a *Archiver) oldestPending() time.Time {
	if a.lin == nil || len(a.lin.pending) == 0 {
		return time.Time{}
	}
	return a.lin.pending[0].Seen
}

// flush writes what is pending, even once ctx has ended (the pod stopping): what it holds
// would otherwise wait for the next archiver to read it again, if compaction lets it.
func (a *Archiver) flush(ctx context.Context) error {
	if a.lin == nil || len(a.lin.pending) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	return a.writeSegment(ctx)
}

// endLineage gives up the lineage compaction overtook; the gap is reported once the next
// lineage has its base.
func (a *Archiver) endLineage(compacted *etcd.CompactedError) {
	a.cfg.Log.Warn("compaction overtook the archive: starting a new lineage from a full snapshot",
		"lineage", a.lin.name, "archivedThrough", a.lin.written, "compactRevision", compacted.CompactRevision)
	a.gap = &ArchiveGap{Lineage: a.lin.name, AfterRevision: a.lin.written, Reason: GapCompacted, Time: a.cfg.Now()}
	a.abandoned[a.lin.name] = true
	a.lin = nil
	a.status.lineageEnded()
}

// trackHighestRevision keeps the cluster's revision in the report: the feed's progress lags
// it while the archiver catches up.
func (a *Archiver) trackHighestRevision(ctx context.Context) {
	tick := time.NewTicker(archiveRetryDelay)
	defer tick.Stop()
	for {
		if rev, err := a.feed.Revision(ctx); err == nil {
			a.status.observed(rev)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leaseTTLs are the granted TTLs of the leases the pending segment's puts name, and of those
// the segment before named, so that a lease in use is asked about once per two segments
// rather than once per put, and memory holds only the leases in use.
type leaseTTLs struct {
	current, previous map[int64]int64
}

// note records the TTL of lease id for the pending segment. A lease already gone (revoked or
// expired since the put, its keys deleted by a later revision) is recorded with TTL 0, which
// the contract reads as unknown: a replay grants it a minute (etcd.Replayer.Apply).
func (l *leaseTTLs) note(ctx context.Context, feed *etcd.ChangeFeed, id int64) error {
	if l.current == nil {
		l.current = map[int64]int64{}
	}
	if _, ok := l.current[id]; ok {
		return nil
	}
	if ttl, ok := l.previous[id]; ok {
		l.current[id] = ttl
		return nil
	}
	ttl, _, err := feed.LeaseTTL(ctx, id)
	if err != nil {
		return err
	}
	l.current[id] = ttl
	return nil
}

// next starts a new segment's leases, the written one's kept to be asked about no more.
func (l *leaseTTLs) next() {
	l.previous, l.current = l.current, map[int64]int64{}
}
