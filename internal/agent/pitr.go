package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// A point-in-time Job materializes a series' keyspace at a revision, in a verify Job's pod:
// pitr-fetch (this agent) resolves the target, plans from the destination's listing which
// full snapshot to start from and which archived segments to replay, fetches that snapshot
// into the scratch directory and leaves the plan beside it; the etcdutl and etcd of the
// cluster's image restore and serve it on loopback; pitr-replay (this agent) replays the
// segments into it and saves a snapshot of the result into the destination.

// PointInTimeResult is what a point-in-time Job reports: the fetch, what it planned; the
// replay, also the materialized snapshot.
type PointInTimeResult struct {
	// Key of the materialized snapshot after the storage prefix (what a restore fetches), its
	// URI, and its size and sha256 as the destination holds it.
	Key       string `json:"key,omitempty"`
	URI       string `json:"uri,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	SizeBytes int64  `json:"sizeBytes,omitempty"`
	// Revision materialized.
	Revision int64 `json:"revision"`
	// BaseKey (after the storage prefix) and BaseRevision are the full snapshot replayed on,
	// Lineage the archive's lineage replayed, ReplayedRevisions how many revisions it gave.
	BaseKey           string `json:"baseKey"`
	BaseRevision      int64  `json:"baseRevision"`
	Lineage           string `json:"lineage"`
	ReplayedRevisions int64  `json:"replayedRevisions"`
	// EtcdVersion of the scratch member the snapshot was saved from.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// TargetTime is the time asked for, whose last archived revision is Revision.
	TargetTime *time.Time `json:"targetTime,omitempty"`
	// EncryptionKeyID is the key the snapshot is encrypted to; empty for a plain one.
	EncryptionKeyID string `json:"encryptionKeyID,omitempty"`
	// Keyspace is the materialized keyspace's digest, to check a restore of it against.
	Keyspace *etcdv1alpha1.SnapshotKeyspace `json:"keyspace,omitempty"`
}

// planFile is where, in the scratch directory, the fetch leaves the plan for the replay.
const planFile = "plan.json"

// MaterializedKey is where the point in time at revision, made for the EtcdRestore restoreUID,
// is saved: pitr/<restore UID>-r<revision>.db in the series' directory. One object per
// restore and revision, which a Job run again writes again.
func MaterializedKey(prefix string, series backupplan.Series, restoreUID string, revision int64) string {
	return series.Dir(prefix) + "pitr/" + restoreUID + "-r" + strconv.FormatInt(revision, 10) + ".db"
}

// PointInTimeConfig is one point in time, as both steps of its Job see it.
type PointInTimeConfig struct {
	// Source is the series' destination, read for the base and the segments and written with
	// the materialized snapshot.
	Source *storage.Destination
	Series backupplan.Series
	Target archive.Target
	// ExcludeKeys are snapshots never taken as the base; Recorded those the EtcdBackup's
	// status records (keys after the storage prefix).
	ExcludeKeys []string
	Recorded    []jobspec.Snapshot
	// Keys decrypt the base and the segments and encrypt the result (to their newest key).
	Keys *encryption.Keyring
	// Dir is the scratch directory.
	Dir        string
	RestoreUID string
	// Etcd reaches the scratch member; Ready bounds the wait for it.
	Etcd  etcd.Config
	Ready time.Duration
}

// RunPointInTimeFetch is `manager agent pitr-fetch`: plan the point in time and fetch its base
// into the scratch directory. A point in time the archive cannot materialize fails the Job for
// good, naming why and what it can.
func RunPointInTimeFetch(ctx context.Context) int {
	report := Report{}
	cfg, closeSource, err := pointInTimeFromEnvironment(ctx)
	var plan archive.Plan
	var fetched RestoreResult
	if err == nil {
		defer closeSource()
		plan, fetched, err = PointInTimeFetch(ctx, cfg)
	}
	if err != nil {
		report.Error, report.Permanent, report.Unrestorable = err.Error(), isPermanent(err), IsUnrestorable(err)
	} else {
		result := planned(cfg, plan)
		report.Restore, report.PointInTime = &fetched, &result
	}
	return finish(report)
}

// RunPointInTimeReplay is `manager agent pitr-replay`: replay the plan into the scratch member
// and save the materialized snapshot.
func RunPointInTimeReplay(ctx context.Context) int {
	report := Report{}
	cfg, closeSource, err := pointInTimeFromEnvironment(ctx)
	var result PointInTimeResult
	if err == nil {
		defer closeSource()
		// Root's client certificate for the scratch member, made by the fetch.
		cfg.Etcd.TLS, err = VerifyClientTLS(verifyTLSDir())
	}
	if err == nil {
		result, err = PointInTimeReplay(ctx, cfg)
	}
	if err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	} else {
		report.PointInTime = &result
	}
	return finish(report)
}

func pointInTimeFromEnvironment(ctx context.Context) (PointInTimeConfig, func(), error) {
	cfg, err := readJobConfig()
	if err != nil {
		return PointInTimeConfig{}, nil, err
	}
	series := backupplan.Series{Namespace: cfg.Namespace, Cluster: cfg.Cluster, Backup: cfg.Backup, UID: cfg.BackupUID}
	target := archive.Target{Revision: cfg.TargetRevision, Time: cfg.TargetTime}
	if err := errors.Join(series.Validate(), target.Validate()); err != nil {
		return PointInTimeConfig{}, nil, permanentError{err}
	}
	if cfg.RestoreUID == "" || strings.Contains(cfg.RestoreUID, "/") {
		return PointInTimeConfig{}, nil, permanentError{fmt.Errorf("restore UID %q cannot name the materialized snapshot", cfg.RestoreUID)}
	}
	keys, err := encryptionKeys(cfg)
	if err != nil {
		return PointInTimeConfig{}, nil, err
	}
	source, err := openStorage(ctx, cfg.Storage)
	if err != nil {
		return PointInTimeConfig{}, nil, err
	}
	return PointInTimeConfig{
		Source: source, Series: series, Target: target, ExcludeKeys: cfg.ExcludeKeys, Recorded: cfg.Recorded, Keys: keys,
		Dir: podPaths.verifyScratch, RestoreUID: cfg.RestoreUID, Etcd: etcd.Config{Endpoints: cfg.Endpoints}, Ready: verifyReady,
	}, func() { _ = source.Close() }, nil
}

// PointInTimeFetch resolves cfg's target, plans it from the destination's listing, fetches the
// plan's base into cfg.Dir (checking its recorded sha256, decrypting it) and leaves there the
// plan and the TLS material the scratch member serves with.
func PointInTimeFetch(ctx context.Context, cfg PointInTimeConfig) (archive.Plan, RestoreResult, error) {
	found, err := readArchive(ctx, cfg)
	if err != nil {
		return archive.Plan{}, RestoreResult{}, err
	}
	segs, target, err := resolveTarget(ctx, cfg, found)
	if err != nil {
		return archive.Plan{}, RestoreResult{}, err
	}
	plan, fetched, err := planAndFetch(ctx, cfg, found, segs, target)
	if err != nil {
		return archive.Plan{}, RestoreResult{}, err
	}
	if err := writePlan(cfg.Dir, plan); err != nil {
		return archive.Plan{}, RestoreResult{}, err
	}
	// The scratch member starts next, on the material made here (jobspec.VerifyEtcdTLSArgs).
	return plan, fetched, WriteVerifyTLS(filepath.Join(cfg.Dir, jobspec.VerifyTLSSubdir), time.Now())
}

// planAndFetch plans target and fetches the plan's base. A base whose name understated its
// revision (its backup read the revision before streaming, and the snapshot passed it) is
// planned again from the revision it holds, which may choose it again, already fetched, or
// another: each base is corrected once, so it ends.
func planAndFetch(ctx context.Context, cfg PointInTimeConfig, found seriesArchive, segs []archive.SegmentInfo, target int64) (archive.Plan, RestoreResult, error) {
	bases := found.bases
	var fetched RestoreResult
	fetchedKey := ""
	for range len(bases) + 1 {
		plan, err := archive.PlanTo(bases, segs, found.lineages, target)
		if err != nil {
			return archive.Plan{}, RestoreResult{}, permanentError{err}
		}
		if plan.Base.Key == fetchedKey && plan.Base.Revision == fetched.Revision {
			return plan, fetched, nil
		}
		fetched, err = Fetch(ctx, FetchConfig{
			Source: cfg.Source, Key: strings.TrimPrefix(plan.Base.Key, cfg.Source.Prefix()), SHA256: found.sha256[plan.Base.Key], Dir: cfg.Dir, KeepDir: true, Keys: cfg.Keys,
		})
		if err != nil {
			return archive.Plan{}, RestoreResult{}, err
		}
		if fetched.Revision == plan.Base.Revision {
			return plan, fetched, nil
		}
		fetchedKey = plan.Base.Key
		bases = withRevision(bases, fetchedKey, fetched.Revision)
	}
	return archive.Plan{}, RestoreResult{}, fmt.Errorf("every base planned held another revision than its name or record gave, the last %s %d", fetchedKey, fetched.Revision)
}

// withRevision is bases with key's revision set to rev.
func withRevision(bases []archive.Base, key string, rev int64) []archive.Base {
	out := slices.Clone(bases)
	for i := range out {
		if out[i].Key == key {
			out[i].Revision = rev
		}
	}
	return out
}

// seriesArchive is what the destination holds of a series for a point in time: its full
// snapshots that may be bases, the sha256 recorded of them, its segments and its lineages.
type seriesArchive struct {
	bases    []archive.Base
	sha256   map[string]string
	segs     []archive.SegmentInfo
	lineages map[string]archive.Lineage
}

// readArchive lists the series' full snapshots, leaving out those excluded, and its segments,
// and reads the lineage.json of every lineage listed.
func readArchive(ctx context.Context, cfg PointInTimeConfig) (seriesArchive, error) {
	prefix := cfg.Source.Prefix()
	dir := cfg.Series.Dir(prefix)
	objects, err := cfg.Source.List(ctx, dir)
	if err != nil {
		return seriesArchive{}, err
	}
	segs, err := archive.ListSegments(ctx, cfg.Source, dir)
	if err != nil {
		return seriesArchive{}, err
	}
	found := seriesArchive{segs: segs, sha256: map[string]string{}, lineages: map[string]archive.Lineage{}}
	// Every lineage with a lineage.json, those without a segment yet too: their base's own
	// revision is recoverable. A lineage whose segments have no lineage.json has no base: the
	// plan says so if they are needed.
	names, err := archive.ListLineages(ctx, cfg.Source, dir)
	if err != nil {
		return seriesArchive{}, err
	}
	for _, name := range names {
		l, err := archive.ReadLineage(ctx, cfg.Source, dir, name)
		if storage.IsNotFound(err) {
			continue
		}
		if err != nil {
			return seriesArchive{}, err
		}
		if !strings.HasPrefix(l.BaseKey, dir) {
			l.BaseKey = prefix + l.BaseKey
		}
		found.lineages[name] = l
	}
	recorded := map[string]jobspec.Snapshot{}
	for _, r := range cfg.Recorded {
		recorded[prefix+r.Key] = r
	}
	for _, o := range objects {
		began, ok := backupplan.ParseObjectName(prefix, cfg.Series, o.Key)
		if !ok || slices.Contains(cfg.ExcludeKeys, strings.TrimPrefix(o.Key, prefix)) {
			continue
		}
		found.bases = append(found.bases, archive.Base{Key: o.Key, Revision: baseRevision(o.Key, recorded, found.lineages), Time: began})
		found.sha256[o.Key] = recorded[o.Key].SHA256
	}
	return found, nil
}

// baseRevision is the revision the full snapshot key holds as best known before fetching it:
// the EtcdBackup's record, or its lineage's, or, from its name, the revision its backup read
// before streaming it.
func baseRevision(key string, recorded map[string]jobspec.Snapshot, lineages map[string]archive.Lineage) int64 {
	if r := recorded[key]; r.Revision > 0 {
		return r.Revision
	}
	for _, l := range lineages {
		if l.BaseKey == key && l.Base > 0 {
			return l.Base
		}
	}
	rev, _ := backupplan.ObjectRevision(key)
	return rev
}

// resolveTarget is the revision cfg's target names, and the segments it may be planned from:
// a time's is the last revision the archive saw by then, in the lineage seen then alone.
func resolveTarget(ctx context.Context, cfg PointInTimeConfig, found seriesArchive) ([]archive.SegmentInfo, int64, error) {
	if cfg.Target.Time == nil {
		return found.segs, cfg.Target.Revision, nil
	}
	dir := cfg.Series.Dir(cfg.Source.Prefix())
	lineage, rev, err := archive.RevisionAt(found.segs, *cfg.Target.Time, segmentOpener(ctx, cfg.Source, cfg.Keys),
		func(lineage string) (archive.Watermark, error) {
			return archive.ReadWatermark(ctx, cfg.Source, dir, lineage)
		})
	var refused *archive.Unrecoverable
	if errors.As(err, &refused) {
		return nil, 0, permanentError{err}
	}
	if err != nil {
		return nil, 0, err
	}
	return slices.DeleteFunc(slices.Clone(found.segs), func(s archive.SegmentInfo) bool { return s.Lineage != lineage }), rev, nil
}

// segmentOpener opens a segment's plaintext: decrypted with keys when it is encrypted. A
// segment no key opens fails for good, naming the key it needs.
func segmentOpener(ctx context.Context, source *storage.Destination, keys *encryption.Keyring) func(archive.SegmentInfo) (io.ReadCloser, error) {
	return func(s archive.SegmentInfo) (io.ReadCloser, error) {
		r, err := source.Open(ctx, s.Key)
		if err != nil {
			return nil, err
		}
		plain, err := segmentPlaintext(s, r, keys)
		if err != nil {
			_ = r.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{plain, r}, nil
	}
}

func segmentPlaintext(s archive.SegmentInfo, r io.Reader, keys *encryption.Keyring) (io.Reader, error) {
	stream, encrypted, err := encryption.Peek(r)
	if err != nil || !encrypted {
		return stream, err
	}
	if keys == nil {
		return nil, permanentError{fmt.Errorf("segment %s is encrypted to key %s and no Secret of keys was given to decrypt it: the EtcdBackup's spec.encryption.secretName must name one that holds it", s.Key, orUnknown(s.KeyID))}
	}
	plain, err := keys.Decrypt(stream, s.KeyID)
	if err != nil {
		return nil, permanentError{fmt.Errorf("segment %s: %w", s.Key, err)}
	}
	return plain, nil
}

func writePlan(dir string, plan archive.Plan) error {
	raw, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, planFile), raw, 0o600)
}

func readPlan(dir string) (archive.Plan, error) {
	var plan archive.Plan
	raw, err := os.ReadFile(filepath.Join(dir, planFile))
	if err != nil {
		return plan, permanentError{fmt.Errorf("the fetch's plan: %w", err)}
	}
	if err := json.Unmarshal(raw, &plan); err != nil {
		return plan, permanentError{fmt.Errorf("the fetch's plan: %w", err)}
	}
	return plan, nil
}

// planned is what the fetch reports of plan.
func planned(cfg PointInTimeConfig, plan archive.Plan) PointInTimeResult {
	return PointInTimeResult{
		Revision: plan.Revision, BaseKey: strings.TrimPrefix(plan.Base.Key, cfg.Source.Prefix()), BaseRevision: plan.Base.Revision,
		Lineage: plan.Lineage, ReplayedRevisions: plan.Revision - plan.Base.Revision, TargetTime: cfg.Target.Time,
	}
}

// PointInTimeReplay waits for the scratch member serving the fetched base, replays the fetch's
// plan into it and saves a snapshot of it into the destination, encrypted to the newest of
// cfg.Keys when they are given, read back and checked like a backup's.
func PointInTimeReplay(ctx context.Context, cfg PointInTimeConfig) (PointInTimeResult, error) {
	plan, err := readPlan(cfg.Dir)
	if err != nil {
		return PointInTimeResult{}, err
	}
	cl, err := scratchClient(ctx, cfg)
	if err != nil {
		return PointInTimeResult{}, err
	}
	defer cl.Close()
	replayer, err := etcd.NewReplayer(cfg.Etcd)
	if err != nil {
		return PointInTimeResult{}, err
	}
	// Closed only once the snapshot is saved: it holds the leases, and one expiring before
	// would delete its keys.
	defer replayer.Close()
	err = archive.Replay(ctx, replayer, segmentOpener(ctx, cfg.Source, cfg.Keys), plan)
	if errors.Is(err, archive.ErrUnreplayable) {
		return PointInTimeResult{}, permanentError{err}
	}
	if err != nil {
		return PointInTimeResult{}, err
	}
	return saveMaterialized(ctx, cl, cfg, plan)
}

// scratchClient is a client of the scratch member, once it answers. A member that refuses
// root's certificate refuses it for good.
func scratchClient(ctx context.Context, cfg PointInTimeConfig) (etcd.Client, error) {
	url := cfg.Etcd.Endpoints[0]
	deadline := time.Now().Add(cfg.Ready)
	if err := waitListening(ctx, url, deadline); err != nil {
		return nil, err
	}
	cl, err := etcd.New(cfg.Etcd)
	if err != nil {
		return nil, err
	}
	if _, _, err := waitAnswering(ctx, cl, url, deadline); err != nil {
		_ = cl.Close()
		if etcd.RefusedTheUser(err) {
			return nil, permanentError{fmt.Errorf("the scratch member refused the replay: %w", err)}
		}
		return nil, err
	}
	return cl, nil
}

// saveMaterialized streams a snapshot of the scratch member, at plan's revision, to its key.
func saveMaterialized(ctx context.Context, cl etcd.Client, cfg PointInTimeConfig, plan archive.Plan) (PointInTimeResult, error) {
	url := cfg.Etcd.Endpoints[0]
	prefix := cfg.Source.Prefix()
	key := MaterializedKey(prefix, cfg.Series, cfg.RestoreUID, plan.Revision)
	keyspace, err := describeKeyspace(ctx, cl, url, plan.Revision)
	if err != nil {
		return PointInTimeResult{}, err
	}
	metadata := KeyspaceMetadata(keyspace)
	result := planned(cfg, plan)
	if cfg.Keys != nil {
		result.EncryptionKeyID = cfg.Keys.Newest().ID
		metadata = withMetadata(metadata, encryption.MetadataKeyID, result.EncryptionKeyID)
	}
	var info etcd.SnapshotInfo
	stored, err := cfg.Source.Store(ctx, key, metadata, storage.StoreOptions{}, func(w io.Writer) error {
		var err error
		info, err = snapshotInto(ctx, cl, url, w, cfg.Keys)
		return err
	})
	if err != nil {
		return PointInTimeResult{}, err
	}
	if info.Revision != plan.Revision {
		_ = cfg.Source.Delete(ctx, key)
		return PointInTimeResult{}, fmt.Errorf("the scratch member's snapshot is at revision %d, not the %d replayed to; deleted it", info.Revision, plan.Revision)
	}
	result.Key, result.URI, result.SHA256, result.SizeBytes = strings.TrimPrefix(key, prefix), cfg.Source.URI(key), stored.SHA256, stored.SizeBytes
	result.EtcdVersion, result.Keyspace = info.EtcdVersion, keyspace
	return result, nil
}
