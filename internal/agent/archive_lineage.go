package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// The reasons of a gap, as status.archive.gaps says them.
const (
	// GapCompacted: the cluster compacted revisions the archiver had not read.
	GapCompacted = "Compacted"
	// GapRestored: the cluster was restored in place (the restore mark changed).
	GapRestored = "Restored"
	// GapStarted: the newest lineage is of another cluster (one made again under the name).
	GapStarted = "Started"
)

// begin continues the newest lineage of the series when it may, or starts a new one.
func (a *Archiver) begin(ctx context.Context) error {
	clusterID, _, err := a.cl.Members(ctx)
	if err != nil {
		return fmt.Errorf("read the cluster's ID: %w", err)
	}
	if err := a.list(ctx); err != nil {
		return err
	}
	a.status.rangesChanged(a.listing.ranges())
	newest, found := a.listing.newestLineage()
	cont, gapReason := howToGoOn(newest, found, etcd.FormatID(clusterID), a.cfg.RestoreMark, a.abandoned)
	if cont {
		a.continueLineage(newest)
		return nil
	}
	if gapReason != "" {
		a.gap = &ArchiveGap{Lineage: newest.name, AfterRevision: a.listing.lastRevision(newest), Reason: gapReason, Time: a.cfg.Now()}
	}
	return a.startLineage(ctx, clusterID)
}

// namedLineage is a lineage.json and its lineage's name.
type namedLineage struct {
	name string
	archive.Lineage
}

// howToGoOn decides whether the archive continues newest, the series' newest lineage: only
// when it is of this cluster and restore mark and compaction has not overtaken it. Otherwise
// it says why a new lineage leaves a gap; none for the series' first lineage, nor after a
// compaction, whose gap is already being reported.
func howToGoOn(newest namedLineage, found bool, clusterID, restoreMark string, abandoned map[string]bool) (cont bool, gapReason string) {
	switch {
	case !found || abandoned[newest.name]:
		return false, ""
	case newest.ClusterID != clusterID:
		return false, GapStarted
	case newest.RestoreMark != restoreMark:
		return false, GapRestored
	}
	return true, ""
}

// continueLineage takes up l from its last written revision.
func (a *Archiver) continueLineage(l namedLineage) {
	last := a.listing.lastRevision(l)
	a.lin = &lineageRun{name: l.name, record: l.Lineage, delivered: last, written: last}
	a.status.lineageStarted(l.name, l.Base, last)
	a.cfg.Log.Info("continuing the archive", "lineage", l.name, "after", last)
}

// startLineage starts a lineage from the newest snapshot of the series when it is of the
// cluster's current history, or from a snapshot taken now.
func (a *Archiver) startLineage(ctx context.Context, clusterID uint64) error {
	base, ok := a.reusableBase(ctx, clusterID)
	if !ok {
		var err error
		if base, err = a.takeSnapshot(ctx); err != nil {
			return err
		}
	}
	name := archive.LineageName(clusterID, base.Revision)
	record := archive.Lineage{ClusterID: etcd.FormatID(clusterID), Base: base.Revision, BaseKey: base.Key, RestoreMark: a.cfg.RestoreMark, Started: a.cfg.Now()}
	if err := archive.WriteLineage(ctx, a.cfg.Destination, a.dir, name, record); err != nil {
		return err
	}
	a.listing.lineages[name] = record
	a.lin = &lineageRun{name: name, record: record, delivered: base.Revision, written: base.Revision}
	a.status.lineageStarted(name, base.Revision, base.Revision)
	a.cfg.Log.Info("started a lineage", "lineage", name, "base", base.Key)
	if a.gap != nil {
		a.gap.ResumedAt = base.Revision
		a.status.gapped(*a.gap)
		a.cfg.Log.Warn("the archive has a gap", "lineage", a.gap.Lineage, "afterRevision", a.gap.AfterRevision, "resumedAt", a.gap.ResumedAt, "reason", a.gap.Reason)
		a.gap = nil
	}
	return nil
}

// reusableBase is the series' newest snapshot, when a lineage can start from it: one no
// lineage started from yet (the new lineage would take its name and its segments' keys), of
// the cluster's current history (sameHistory), whose revisions after it etcd still holds
// (else the feed says so, and the next lineage takes a snapshot).
func (a *Archiver) reusableBase(ctx context.Context, clusterID uint64) (archive.Base, bool) {
	newest, ok := newestBase(a.listing.bases)
	name := archive.LineageName(clusterID, newest.Revision)
	if _, started := a.listing.lineages[name]; !ok || started || a.abandoned[name] {
		return archive.Base{}, false
	}
	return newest, a.sameHistory(ctx, newest)
}

func newestBase(bases []archive.Base) (archive.Base, bool) {
	var newest archive.Base
	for _, b := range bases {
		if b.Revision > newest.Revision || (b.Revision == newest.Revision && b.Time.After(newest.Time)) {
			newest = b
		}
	}
	return newest, newest.Key != ""
}

// sameHistory says whether snapshot b is of the history the cluster serves now: the keyspace
// digest its backup recorded with it matches the cluster's at its revision (the key count
// always; etcd's hash when both are compacted alike). A snapshot of a cluster since restored
// in place fails it (etcd refuses the revision: the restore marks it compacted), and one of a
// cluster since made again under the name does but for a coincidence of key counts; a
// snapshot recorded without a digest is not trusted.
func (a *Archiver) sameHistory(ctx context.Context, b archive.Base) bool {
	meta, err := a.cfg.Destination.Metadata(ctx, b.Key)
	if err != nil {
		return false
	}
	recorded, ok := keyspaceOf(meta)
	if !ok || recorded.Revision != b.Revision {
		return false
	}
	url, err := a.memberURL(ctx)
	if err != nil {
		return false
	}
	live, err := a.cl.KeyspaceAt(ctx, url, b.Revision)
	if err != nil {
		return false
	}
	return live.Keys == recorded.KeyCount && (live.CompactRevision != recorded.CompactRevision || int64(live.Hash) == recorded.HashKV)
}

// recordedKeyspace is a snapshot's keyspace digest as its metadata holds it.
type recordedKeyspace struct {
	Revision, HashKV, CompactRevision, KeyCount int64
}

// keyspaceOf reads KeyspaceMetadata back.
func keyspaceOf(meta map[string]string) (recordedKeyspace, bool) {
	var k recordedKeyspace
	for key, field := range map[string]*int64{metaRevision: &k.Revision, metaHashKV: &k.HashKV, metaCompactRevision: &k.CompactRevision, metaKeyCount: &k.KeyCount} {
		v, err := strconv.ParseInt(meta[key], 10, 64)
		if err != nil {
			return recordedKeyspace{}, false
		}
		*field = v
	}
	return k, true
}

// memberURL is the client URL of a member that has started.
func (a *Archiver) memberURL(ctx context.Context) (string, error) {
	_, members, err := a.cl.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range members {
		if m.Started() {
			return m.ClientURLs[0], nil
		}
	}
	return "", fmt.Errorf("no member of the cluster has started")
}

// takeSnapshot takes a full snapshot into the series, as a scheduled backup does but without
// retention (the scheduled backups prune the series), and returns it as a base.
func (a *Archiver) takeSnapshot(ctx context.Context) (archive.Base, error) {
	res, err := Backup(ctx, BackupConfig{
		Etcd: a.cfg.Etcd, Series: a.cfg.Series, Destination: a.cfg.Destination, Keys: a.cfg.Keys,
		Now: a.cfg.Now, SkipMembers: a.cfg.SkipMembers,
	})
	if err != nil {
		return archive.Base{}, fmt.Errorf("take the snapshot a new lineage starts from: %w", err)
	}
	key := strings.TrimPrefix(res.URI, a.cfg.Destination.URI(""))
	// The revision in its name, not the one reported: the name's is read before the snapshot
	// and the reported one just as it starts, and the snapshot may hold more than either. A
	// lineage from the lowest holds every revision the snapshot may lack, and a restore knows
	// its snapshots' revisions by their names.
	rev, ok := backupplan.ObjectRevision(key)
	if !ok {
		return archive.Base{}, fmt.Errorf("the snapshot %s has no revision in its name", res.URI)
	}
	base := archive.Base{Key: key, Revision: rev, Time: res.StartTime.UTC().Truncate(time.Second)}
	a.listing.bases = append(a.listing.bases, base)
	a.cfg.Log.Info("took a snapshot to start a lineage from", "snapshot", res.URI, "revision", res.Revision)
	return base, nil
}

// seriesBases are the series' full snapshots, from a listing of its directory.
func seriesBases(prefix string, series backupplan.Series, keys []string) []archive.Base {
	var bases []archive.Base
	for _, key := range keys {
		t, ok := backupplan.ParseObjectName(prefix, series, key)
		if !ok {
			continue
		}
		if rev, ok := backupplan.ObjectRevision(key); ok {
			bases = append(bases, archive.Base{Key: key, Revision: rev, Time: t})
		}
	}
	return bases
}
