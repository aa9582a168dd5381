package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// ArchiveStatus is what the archiver reports on GET /status.
type ArchiveStatus struct {
	// Lineage is the lineage being written, Base the revision of the snapshot it started from.
	Lineage string `json:"lineage"`
	Base    int64  `json:"base"`
	// Ranges are what the archive can materialize, per lineage, the newest last (it is the
	// lineage being written when that one has a range).
	Ranges []ArchiveRange `json:"ranges,omitempty"`
	// HighestRevision is the highest revision the cluster had served, as etcd said.
	HighestRevision int64 `json:"highestRevision"`
	// LagRevisions is how many of the cluster's revisions are not written yet; LagSeconds how
	// long the oldest revision received but not written has waited (0 when all are).
	LagRevisions int64 `json:"lagRevisions"`
	LagSeconds   int64 `json:"lagSeconds"`
	// Gaps are where the archive broke since the archiver started, newest last, at most 10.
	Gaps []ArchiveGap `json:"gaps,omitempty"`
	// Error is the last failure, cleared once a segment is written.
	Error string `json:"error,omitempty"`
	// Segments is how many segments the archiver has written since it started.
	Segments int `json:"segments"`
}

// ArchivePoint is a revision and the time the archiver received it.
type ArchivePoint struct {
	Revision int64     `json:"revision"`
	Time     time.Time `json:"time"`
}

// ArchiveRange is revisions a point-in-time restore can reach in one lineage: from its oldest
// usable snapshot to its last written revision.
type ArchiveRange struct {
	Lineage string       `json:"lineage"`
	First   ArchivePoint `json:"first"`
	Last    ArchivePoint `json:"last"`
}

// ArchiveGap is where the archive broke: revisions after AfterRevision (of Lineage) up to
// ResumedAt (the new lineage's snapshot) cannot be restored to.
type ArchiveGap struct {
	Lineage       string    `json:"lineage"`
	AfterRevision int64     `json:"afterRevision"`
	ResumedAt     int64     `json:"resumedAt"`
	Reason        string    `json:"reason"`
	Time          time.Time `json:"time"`
}

// maxReportedGaps bounds the gaps a report lists: status keeps the newest ten.
const maxReportedGaps = 10

// archiveBoard is the archiver's report, written by the archiver and read by /status.
type archiveBoard struct {
	mu  sync.Mutex
	now func() time.Time
	s   ArchiveStatus
	// written is the last revision written; oldest the time the oldest revision not written
	// yet was received (zero when all are).
	written int64
	oldest  time.Time
}

func newArchiveBoard(now func() time.Time) *archiveBoard { return &archiveBoard{now: now} }

func (b *archiveBoard) update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

func (b *archiveBoard) lineageStarted(name string, base, written int64) {
	b.update(func() { b.s.Lineage, b.s.Base, b.written, b.oldest, b.s.Error = name, base, written, time.Time{}, "" })
}

func (b *archiveBoard) lineageEnded() {
	b.update(func() { b.s.Lineage, b.s.Base, b.oldest = "", 0, time.Time{} })
}

// progressed records revisions received through highest, the oldest not written yet received
// at oldest.
func (b *archiveBoard) progressed(highest int64, oldest time.Time) {
	b.update(func() { b.s.HighestRevision, b.oldest = max(b.s.HighestRevision, highest), oldest })
}

// observed records the cluster's revision.
func (b *archiveBoard) observed(highest int64) {
	b.update(func() { b.s.HighestRevision = max(b.s.HighestRevision, highest) })
}

func (b *archiveBoard) segmentWritten(last int64, ranges []ArchiveRange) {
	b.update(func() {
		b.written, b.oldest, b.s.Ranges, b.s.Error = last, time.Time{}, ranges, ""
		b.s.Segments++
	})
}

func (b *archiveBoard) rangesChanged(ranges []ArchiveRange) {
	b.update(func() { b.s.Ranges = ranges })
}

func (b *archiveBoard) failed(err error) {
	b.update(func() { b.s.Error = err.Error() })
}

func (b *archiveBoard) gapped(g ArchiveGap) {
	b.update(func() {
		b.s.Gaps = append(b.s.Gaps, g)
		if n := len(b.s.Gaps); n > maxReportedGaps {
			b.s.Gaps = b.s.Gaps[n-maxReportedGaps:]
		}
	})
}

func (b *archiveBoard) highest() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.HighestRevision
}

// report is the status now, its lag measured now.
func (b *archiveBoard) report() ArchiveStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.s
	out.Ranges = append([]ArchiveRange(nil), b.s.Ranges...)
	out.Gaps = append([]ArchiveGap(nil), b.s.Gaps...)
	if b.s.Lineage != "" {
		out.LagRevisions = max(0, b.s.HighestRevision-b.written)
	}
	if !b.oldest.IsZero() {
		out.LagSeconds = int64(b.now().Sub(b.oldest) / time.Second)
	}
	return out
}

// ArchiveStatusHandler serves GET /status (the report, JSON) and GET /healthz.
func ArchiveStatusHandler(status func() ArchiveStatus) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// defaultStatusAddr is where the archiver reports when its configuration does not say.
const defaultStatusAddr = ":8080"

// RunArchive is `manager agent archive`: the archiver of one backup with spec.continuous, run
// by its Deployment until the pod is stopped. Its configuration comes as a Job's does.
func RunArchive(ctx context.Context) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := runArchive(ctx, log); err != nil {
		log.Error("archiver", "err", err)
		if isPermanent(err) {
			return jobspec.ExitPermanent
		}
		return 1
	}
	return 0
}

func runArchive(ctx context.Context, log *slog.Logger) error {
	cfg, err := readJobConfig()
	if err != nil {
		return err
	}
	archiveCfg, closeStorage, err := archiveConfigFrom(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStorage()
	a, err := NewArchiver(archiveCfg)
	if err != nil {
		return err
	}
	defer a.Close()
	addr := cfg.StatusAddr
	if addr == "" {
		addr = defaultStatusAddr
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve the archive's status on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: ArchiveStatusHandler(a.Status), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			log.Error("status server", "err", err)
		}
	}()
	a.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// archiveConfigFrom is the archiver's configuration from a Job configuration.
func archiveConfigFrom(ctx context.Context, cfg jobspec.JobConfig, log *slog.Logger) (ArchiveConfig, func(), error) {
	etcdCfg, err := etcdConfig(cfg)
	if err != nil {
		return ArchiveConfig{}, nil, err
	}
	keys, err := encryptionKeys(cfg)
	if err != nil {
		return ArchiveConfig{}, nil, err
	}
	dest, err := openStorage(ctx, cfg.Storage)
	if err != nil {
		return ArchiveConfig{}, nil, err
	}
	return ArchiveConfig{
		Etcd:            etcdCfg,
		Series:          backupplan.Series{Namespace: cfg.Namespace, Cluster: cfg.Cluster, Backup: cfg.Backup, UID: cfg.BackupUID},
		Destination:     dest,
		Keys:            keys,
		SegmentDuration: cfg.SegmentDuration,
		SegmentMaxBytes: cfg.SegmentMaxBytes,
		RestoreMark:     cfg.RestoreMark,
		SkipMembers:     cfg.SkipMembers,
		Now:             time.Now,
		Log:             log,
	}, func() { _ = dest.Close() }, nil
}
