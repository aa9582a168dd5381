// Package agent is what the operator's image does when it runs as a backup or restore Job:
// the work that needs the user's volumes and credentials, in the user's namespace.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// BackupConfig is one backup run.
type BackupConfig struct {
	Etcd etcd.Config
	// Series is the EtcdBackup whose snapshots this run writes and prunes.
	Series      backupplan.Series
	Destination BackupDestination
	// MaxCount and MaxAge are the retention (0: no limit); applied after a verified upload.
	MaxCount int
	MaxAge   time.Duration
	// LastBackup is the URI of the snapshot the EtcdBackup's status.lastBackup named when the
	// run's Job was made; retention never deletes it.
	LastBackup string
	// Keys, when set, encrypt the snapshot to their newest key on its way to the destination.
	Keys *encryption.Keyring
	Now  func() time.Time
	// SkipMembers are members found corrupt (hexadecimal IDs): never the source.
	SkipMembers []string
	// ReadBack reads the whole snapshot back from the destination to check it, rather than
	// take the destination's word for it (the S3 store's checksums, a synced file's size).
	ReadBack bool
}

// BackupDestination is what a run needs of where it writes: a *storage.Destination. It is an
// interface so that a test can give a destination that fails as real storage can where a real
// server cannot be made to.
type BackupDestination interface {
	Prefix() string
	URI(key string) string
	Store(ctx context.Context, key string, metadata map[string]string, opts storage.StoreOptions, write func(io.Writer) error) (storage.Stored, error)
	List(ctx context.Context, prefix string) ([]storage.Artifact, error)
	Delete(ctx context.Context, key string) error
	// Open and Upload read and write the series' watermark.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	Upload(ctx context.Context, key string, r io.Reader) error
}

// BackupResult is what a run reports back to the reconciler.
type BackupResult struct {
	URI            string    `json:"uri"`
	SizeBytes      int64     `json:"sizeBytes"`
	SHA256         string    `json:"sha256"`
	Revision       int64     `json:"revision"`
	EtcdVersion    string    `json:"etcdVersion"`
	Member         string    `json:"member"`
	ClusterID      string    `json:"clusterID"`
	StartTime      time.Time `json:"startTime"`
	CompletionTime time.Time `json:"completionTime"`
	// AuthEnabled is whether etcd had authentication on while the snapshot was taken (a
	// restore of it has it on); nil when not known (authDuring).
	AuthEnabled *bool `json:"authEnabled,omitempty"`
	// Keyspace is what the member held at the start of the snapshot, to check a restore of it
	// against; nil when the member had compacted that revision away meanwhile.
	Keyspace *etcdv1alpha1.SnapshotKeyspace `json:"keyspace,omitempty"`
	// Pruned are the URIs of the snapshots retention deleted, newest first.
	Pruned []string `json:"pruned,omitempty"`
	// PrunedCount is how many more, older than those in Pruned, were deleted but are not
	// listed: the whole list would not fit in a termination message.
	PrunedCount int `json:"prunedCount,omitempty"`
	// PruneError is set when the backup succeeded but retention could not delete everything.
	PruneError string `json:"pruneError,omitempty"`
	// HighestRevision is the revision the cluster had served once the snapshot was stored,
	// raised into the series' watermark beside it; WatermarkError says why the watermark was
	// not raised (the snapshot is stored all the same).
	HighestRevision int64  `json:"highestRevision,omitempty"`
	WatermarkError  string `json:"watermarkError,omitempty"`
	// EncryptionKeyID is the key the snapshot is encrypted to; empty for a plain snapshot.
	EncryptionKeyID string `json:"encryptionKeyID,omitempty"`
	// Check says how the destination was found to hold what was streamed ("sha256 checked by
	// the store", "size checked after fsync", "read back", with why when read back unasked);
	// empty from agents that always read back.
	Check string `json:"check,omitempty"`
}

// Backup streams a snapshot of the most up-to-date voting member into the destination,
// encrypted on the way when cfg.Keys is set, checks that the destination holds what was
// streamed to it (storage.Destination.Store), then applies retention. A snapshot that failed or does not verify leaves
// no object behind. Size and sha256 are of what the destination holds: the ciphertext of an
// encrypted snapshot, whose plaintext is never written anywhere.
func Backup(ctx context.Context, cfg BackupConfig) (BackupResult, error) {
	if err := cfg.Series.Validate(); err != nil {
		return BackupResult{}, permanentError{err}
	}
	start := cfg.Now()
	cl, err := etcd.New(cfg.Etcd)
	if err != nil {
		return BackupResult{}, err
	}
	defer cl.Close()
	source, status, err := pickSource(ctx, cl, cfg.SkipMembers)
	if err != nil {
		return BackupResult{}, err
	}
	key := backupplan.ObjectName(cfg.Destination.Prefix(), cfg.Series, start, status.Revision)
	keyspace, err := describeKeyspace(ctx, cl, source, status.Revision)
	if err != nil {
		return BackupResult{}, err
	}

	authBefore := authStatus(ctx, cl)

	metadata := KeyspaceMetadata(keyspace)
	var keyID string
	if cfg.Keys != nil {
		keyID = cfg.Keys.Newest().ID
		metadata = withMetadata(metadata, encryption.MetadataKeyID, keyID)
	}
	var info etcd.SnapshotInfo
	stored, err := cfg.Destination.Store(ctx, key, metadata, storage.StoreOptions{ReadBack: cfg.ReadBack}, func(w io.Writer) error {
		var err error
		info, err = snapshotInto(ctx, cl, source, w, cfg.Keys)
		return err
	})
	if err != nil {
		return BackupResult{}, err
	}

	auth := authDuring(authBefore, authStatus(ctx, cl))

	result := BackupResult{
		URI: cfg.Destination.URI(key), SizeBytes: stored.SizeBytes, SHA256: stored.SHA256,
		Revision: info.Revision, EtcdVersion: info.EtcdVersion,
		Member: etcd.FormatID(info.MemberID), ClusterID: etcd.FormatID(info.ClusterID),
		StartTime: start, CompletionTime: cfg.Now(), Keyspace: keyspace, AuthEnabled: auth,
		EncryptionKeyID: keyID, Check: stored.Described(),
	}
	result.HighestRevision, err = raiseWatermark(ctx, cfg, cl, source, info.Revision)
	if err != nil {
		result.WatermarkError = err.Error()
	}
	result.Pruned, err = prune(ctx, cfg, key)
	if err != nil {
		result.PruneError = err.Error()
	}
	return result, nil
}

// raiseWatermark reads, from etcd, the revision the cluster has served now that the snapshot
// is stored (at least the snapshot's), and raises the series' watermark to it: a restore of any
// snapshot of the series, even from a bare location, then knows how far past the snapshot
// clients may have read and watched, and refuses a revision bump that stops short of it.
func raiseWatermark(ctx context.Context, cfg BackupConfig, cl etcd.Client, source string, snapshotRevision int64) (int64, error) {
	highest := snapshotRevision
	if st, err := cl.Status(ctx, source); err == nil {
		highest = max(highest, st.Revision)
	}
	w := archive.Watermark{HighestRevision: highest, Time: cfg.Now()}
	if err := archive.RaiseSeriesWatermark(ctx, cfg.Destination, cfg.Series.Dir(cfg.Destination.Prefix()), w); err != nil {
		return highest, fmt.Errorf("raise the series' watermark to revision %d: %w", highest, err)
	}
	return highest, nil
}

// snapshotInto streams the snapshot into w, through age to keys' newest key when keys is set:
// the plaintext exists only in the copy buffers between the two.
func snapshotInto(ctx context.Context, cl etcd.Client, source string, w io.Writer, keys *encryption.Keyring) (etcd.SnapshotInfo, error) {
	if keys == nil {
		return cl.Snapshot(ctx, source, w)
	}
	encrypted, _, err := keys.Encrypt(w)
	if err != nil {
		return etcd.SnapshotInfo{}, err
	}
	info, err := cl.Snapshot(ctx, source, encrypted)
	if err != nil {
		return info, err
	}
	// The last chunk, with its end marker: without it the object would not decrypt.
	return info, encrypted.Close()
}

// withMetadata is metadata with key set to value.
func withMetadata(metadata map[string]string, key, value string) map[string]string {
	if metadata == nil {
		metadata = map[string]string{}
	}
	metadata[key] = value
	return metadata
}

// digest counts and hashes what is written through it.
type digest struct {
	w    io.Writer
	hash hash.Hash
	n    int64
}

func newDigest(w io.Writer) *digest { return &digest{w: w, hash: sha256.New()} }

func (d *digest) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.hash.Write(p[:n])
	d.n += int64(n)
	return n, err
}

// sum is the bytes written through d and their sha256, in hexadecimal.
func (d *digest) sum() (int64, string) { return d.n, hex.EncodeToString(d.hash.Sum(nil)) }

// describeKeyspace is the digest of the source's keyspace at the revision the snapshot is about
// to be taken at, asked just before it is: the snapshot then holds every write the digest
// covers, and the digest can travel with the object, in its metadata. A compaction between
// the digest and the snapshot leaves the snapshot compacted further than the digest says; the
// verification compares the hash only when the compact revisions match, and the key count at
// the revision either way. A revision already compacted away leaves nothing to record, which
// is no reason to fail the backup.
func describeKeyspace(ctx context.Context, cl etcd.Client, source string, revision int64) (*etcdv1alpha1.SnapshotKeyspace, error) {
	d, err := cl.KeyspaceAt(ctx, source, revision)
	if errors.Is(err, etcd.ErrCompacted) {
		return nil, nil //nolint:nilerr // a snapshot without a digest is still a snapshot
	}
	if err != nil {
		return nil, err
	}
	return &etcdv1alpha1.SnapshotKeyspace{Revision: d.Revision, HashKV: int64(d.Hash), CompactRevision: d.CompactRevision, KeyCount: d.Keys}, nil
}

// authStatus is whether etcd has authentication on, or nil when it does not say: a backup is
// not failed for it, its snapshot is only recorded without it.
func authStatus(ctx context.Context, cl etcd.Client) *bool {
	enabled, err := cl.AuthEnabled(ctx)
	if err != nil {
		return nil
	}
	return &enabled
}

// authDuring is whether etcd had authentication on while the snapshot was taken, from its
// answers just before and just after: the snapshot holds the state of a moment between the two.
// Should they differ (authentication turned on meanwhile), or either be missing, it is not
// known.
func authDuring(before, after *bool) *bool {
	if before == nil || after == nil || *before != *after {
		return nil
	}
	return before
}

// The object metadata a snapshot's keyspace digest is stored under, next to the snapshot,
// for whoever finds the object without its EtcdBackup.
const (
	metaRevision        = "etcd-revision"
	metaHashKV          = "etcd-hashkv"
	metaCompactRevision = "etcd-compact-revision"
	metaKeyCount        = "etcd-key-count"
)

// KeyspaceMetadata renders a keyspace digest as object metadata; nil without one.
func KeyspaceMetadata(k *etcdv1alpha1.SnapshotKeyspace) map[string]string {
	if k == nil {
		return nil
	}
	return map[string]string{
		metaRevision:        strconv.FormatInt(k.Revision, 10),
		metaHashKV:          strconv.FormatInt(k.HashKV, 10),
		metaCompactRevision: strconv.FormatInt(k.CompactRevision, 10),
		metaKeyCount:        strconv.FormatInt(k.KeyCount, 10),
	}
}

// pickSource is the client URL of the healthy voting member with the highest revision:
// a learner may lag, and the newest data is what a backup is for. A member found corrupt (skip,
// or named by etcd's CORRUPT alarm) never is: its keyspace diverged from the others'.
func pickSource(ctx context.Context, cl etcd.Client, skip []string) (string, etcd.MemberStatus, error) {
	_, members, err := cl.Members(ctx)
	if err != nil {
		return "", etcd.MemberStatus{}, err
	}
	var best string
	var bestStatus etcd.MemberStatus
	for _, m := range members {
		if m.IsLearner || len(m.ClientURLs) == 0 || slices.Contains(skip, m.IDString()) {
			continue
		}
		st, err := cl.Status(ctx, m.ClientURLs[0])
		if err != nil || len(st.Errors) > 0 || slices.Contains(st.CorruptMembers, m.ID) {
			continue
		}
		if best == "" || st.Revision > bestStatus.Revision {
			best, bestStatus = m.ClientURLs[0], st
		}
	}
	if best == "" {
		return "", etcd.MemberStatus{}, errors.New("no healthy voting member to take a snapshot from")
	}
	return best, bestStatus, nil
}

// prune deletes this EtcdBackup's snapshots that the retention no longer keeps, newest first,
// and returns their URIs in that order. It lists only the series' own directory and deletes
// only what ObjectName would have named in it: other EtcdBackups' snapshots and those of the
// earlier key format are never touched.
//
// It never deletes the run's own snapshot (own; an earlier run whose clock was ahead may have
// named a snapshot that sorts after it), nor cfg.LastBackup. This run's result reaches
// status only after the Job has ended, so until then status.lastBackup names the snapshot it
// named when the Job was made; deleting that one would leave status naming a snapshot that
// does not exist (for good, if the run's report were lost). With maxCount >= 2 that snapshot
// is the newest before this run's and is kept anyway, so the destination holds exactly
// maxCount after each run. With maxCount 1, or once it is older than maxAge, it stays one run
// longer: the next run, made once status names this run's snapshot, deletes it. The other ways to keep
// both promises cost more than that snapshot: the operator cannot prune itself (it mounts no
// claim and never uses the user's storage credentials, only checks they are there), and a
// second Job after each record would double the Jobs, the pods and the time a run holds OLM
// upgrades back.
func prune(ctx context.Context, cfg BackupConfig, own string) ([]string, error) {
	if cfg.MaxCount == 0 && cfg.MaxAge == 0 {
		return nil, nil
	}
	prefix := cfg.Destination.Prefix()
	objects, err := cfg.Destination.List(ctx, cfg.Series.Dir(prefix))
	if err != nil {
		return nil, err
	}
	var snapshots []backupplan.Snapshot
	for _, o := range objects {
		if t, ok := backupplan.ParseObjectName(prefix, cfg.Series, o.Key); ok {
			snapshots = append(snapshots, backupplan.Snapshot{Key: o.Key, Time: t})
		}
	}
	var pruned []string
	keep := []string{own}
	if last, ok := strings.CutPrefix(cfg.LastBackup, cfg.Destination.URI("")); ok {
		keep = append(keep, last)
	}
	for _, key := range backupplan.ToPrune(snapshots, cfg.MaxCount, cfg.MaxAge, cfg.Now(), keep) {
		if err := cfg.Destination.Delete(ctx, key); err != nil {
			return pruned, err
		}
		pruned = append(pruned, cfg.Destination.URI(key))
	}
	return pruned, nil
}
