package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// A backup raises its series' watermark, beside its snapshots, to the revision the cluster had
// served once the snapshot was stored: at least the snapshot's own.
func TestABackupRaisesItsSeriesWatermark(t *testing.T) {
	_, dest, res := backUpCluster(t, 1, 50)
	if res.WatermarkError != "" || res.HighestRevision < res.Revision {
		t.Fatalf("result %+v: want the watermark raised to at least revision %d", res, res.Revision)
	}
	w, found, err := archive.HighestServed(t.Context(), dest, nightly.Dir(dest.Prefix()))
	if err != nil || !found || w.HighestRevision != res.HighestRevision {
		t.Fatalf("watermark in the store %+v (found %v, %v), want revision %d", w, found, err, res.HighestRevision)
	}
}

// The series' watermark only rises: a lower one (a backup of a snapshot restored without a
// bump, or a run that read its cluster earlier) leaves it as it is.
func TestTheSeriesWatermarkOnlyRises(t *testing.T) {
	dest := dirDestination(t)
	dir := nightly.Dir(dest.Prefix())
	for _, rev := range []int64{500, 300} {
		if err := archive.RaiseSeriesWatermark(t.Context(), dest, dir, archive.Watermark{HighestRevision: rev, Time: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if w, _, _ := archive.HighestServed(t.Context(), dest, dir); w.HighestRevision != 500 {
		t.Fatalf("watermark %d, want 500", w.HighestRevision)
	}
}

// A restore's revision bump that stops short of the highest revision the series' watermarks
// record (the series' own or an archive lineage's) is refused before anything is restored,
// naming the bump that would do; one that passes it, None (0), and a series with no watermark
// are let through.
func TestARevisionBumpShortOfTheStoresWatermarkIsRefused(t *testing.T) {
	dest := dirDestination(t)
	dir := nightly.Dir(dest.Prefix())
	if err := archive.RaiseSeriesWatermark(t.Context(), dest, dir, archive.Watermark{HighestRevision: 1_000, Time: t0}); err != nil {
		t.Fatal(err)
	}
	lineage := archive.LineageName(0xabc, 900)
	if err := archive.WriteLineage(t.Context(), dest, dir, lineage, archive.Lineage{ClusterID: "abc", Base: 900, Started: t0}); err != nil {
		t.Fatal(err)
	}
	if err := archive.WriteWatermark(t.Context(), dest, dir, lineage, archive.Watermark{HighestRevision: 5_000, Time: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	seriesDir := strings.TrimPrefix(dir, dest.Prefix())
	snapshotKey := seriesDir + "20260301T120000Z-r900.db"

	// Bumped to exactly the watermark, the restored cluster's first write would be revision 5001,
	// which a client that saw 5000 watches from without a compaction error: refused too.
	for _, bump := range []int64{4_000, 4_100} {
		err := agent.BumpPassesWatermark(t.Context(), dest, agent.WatermarkDirOf(snapshotKey, ""), 900, bump)
		if err == nil || !agent.IsPermanent(err) || !strings.Contains(err.Error(), "revision 5000") || !strings.Contains(err.Error(), "4101 or more") {
			t.Fatalf("bump %d from revision 900 past a lineage's watermark of 5000: %v", bump, err)
		}
	}
	for _, ok := range []struct {
		name      string
		dir       string
		rev, bump int64
	}{
		{"past the watermark", agent.WatermarkDirOf(snapshotKey, ""), 900, 4_101},
		{"None", agent.WatermarkDirOf(snapshotKey, ""), 900, 0},
		{"a directory with no watermark", agent.WatermarkDirOf("elsewhere/snap.db", ""), 900, 1},
		{"a key at the prefix's root", agent.WatermarkDirOf("snap.db", ""), 900, 1},
	} {
		if err := agent.BumpPassesWatermark(t.Context(), dest, ok.dir, ok.rev, ok.bump); err != nil {
			t.Errorf("%s: %v", ok.name, err)
		}
	}
	// A point in time is built into the series' pitr/ directory: the controller names the
	// series' directory.
	if err := agent.BumpPassesWatermark(t.Context(), dest, agent.WatermarkDirOf(seriesDir+"pitr/u-r950.db", seriesDir), 950, 10); err == nil {
		t.Fatal("a point in time's bump short of the watermark was let through")
	}
}

func dirDestination(t *testing.T) *storage.Destination {
	t.Helper()
	dest, err := storage.OpenDir(t.TempDir(), "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	return dest
}
