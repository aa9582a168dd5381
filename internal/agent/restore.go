package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// A restore Job prepares one member's data on its claim, mounted where the member pod mounts
// it, in three containers: fetch (this agent) downloads and checks the snapshot into the
// staging directory; the target etcd image's own etcdutl restores it into a data directory
// next to it; install (this agent) moves that into place. The member's data directory is only
// ever created whole, by a rename, and never replaced. Its paths are in internal/jobspec.

// RestoreResult is what the fetch step found.
type RestoreResult struct {
	URI       string `json:"uri"`
	SizeBytes int64  `json:"sizeBytes"`
	SHA256    string `json:"sha256"`
	// Revision is the newest revision in the snapshot: what the restored cluster starts from.
	Revision int64 `json:"revision"`
	// Missing is the snapshot asked for, when it no longer existed and URI is one of the
	// fallbacks.
	Missing string `json:"missing,omitempty"`
}

// FetchConfig is one fetch.
type FetchConfig struct {
	Source *storage.Destination
	// Key of the snapshot, after the source's prefix.
	Key string
	// SHA256 the snapshot must have; empty skips the check (etcdutl still checks the
	// snapshot's own trailing hash).
	SHA256 string
	// Dir is the staging directory, emptied first.
	Dir string
	// Fallbacks are the snapshots to restore instead, newest first, should Key no longer
	// exist (deleted outside the operator, by a bucket's lifecycle rule, or by the retention
	// of an operator before this one): the first that does is fetched, and the result's URI
	// says which.
	Fallbacks []jobspec.Snapshot
	// KeepDir empties Dir rather than removing it: a mounted volume's root cannot be removed.
	KeepDir bool
	// Keys decrypt an encrypted snapshot; without them, one is refused. A plain snapshot
	// needs none.
	Keys *encryption.Keyring
}

// Fetch downloads the snapshot into cfg.Dir/snapshot.db, decrypting it on the way when it is
// encrypted and checking the sha256 of what storage holds, and reads the revision it holds.
// Anything a failed attempt left in the staging directory is removed first, so a retried Job
// starts clean. An encrypted snapshot none of cfg.Keys opens is refused before anything is
// written: only its header has been read.
func Fetch(ctx context.Context, cfg FetchConfig) (RestoreResult, error) {
	if err := emptyDir(cfg.Dir, cfg.KeepDir); err != nil {
		return RestoreResult{}, fmt.Errorf("empty the staging directory: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return RestoreResult{}, fmt.Errorf("make the staging directory: %w", err)
	}
	r, key, want, missing, err := openFirstThatExists(ctx, cfg)
	if err != nil {
		return RestoreResult{}, err
	}
	defer r.Close()
	uri := cfg.Source.URI(key)
	stored := newDigest(io.Discard)
	stream, err := plaintextOf(ctx, cfg, key, io.TeeReader(r, stored))
	if err != nil {
		return RestoreResult{}, err
	}
	file := filepath.Join(cfg.Dir, filepath.Base(jobspec.StagedSnapshot))
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return RestoreResult{}, err
	}
	// Read to the end of what storage holds, which the sha256 covers: age fails on anything
	// after its last chunk.
	n, err := io.Copy(f, stream)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	storedBytes, sum := stored.sum()
	if err != nil {
		_ = os.Remove(file)
		return RestoreResult{}, fmt.Errorf("download %s after %d bytes: %w", uri, storedBytes, err)
	}
	if want != "" && sum != want {
		_ = os.Remove(file)
		return RestoreResult{}, unrestorableError{fmt.Errorf("%s is %d bytes with sha256 %s, not the recorded %s: corrupt or truncated; nothing was restored", uri, storedBytes, sum, want)}
	}
	rev, err := SnapshotRevision(file)
	if err != nil {
		_ = os.Remove(file)
		return RestoreResult{}, unrestorableError{fmt.Errorf("%s is not a readable etcd snapshot: %w", uri, err)}
	}
	if err := roomToRestore(cfg.Dir, n); err != nil {
		_ = os.Remove(file)
		return RestoreResult{}, err
	}
	result := RestoreResult{URI: uri, SizeBytes: storedBytes, SHA256: sum, Revision: rev}
	if len(missing) > 0 {
		result.Missing = missing[0]
	}
	return result, nil
}

// WatermarkDirOf is where the watermarks of the series of the snapshot at key (after the
// storage's prefix) are: dir when given, else the snapshot's own directory.
func WatermarkDirOf(key, dir string) string {
	if dir != "" {
		return dir
	}
	if d := path.Dir(key); d != "." {
		return d + "/"
	}
	return ""
}

// BumpPassesWatermark refuses a restore whose revision bump stops short of the highest
// revision the series' watermarks in the store record: clients of the old cluster may hold
// revisions up to it, which the restored cluster would hand out again with other data (a
// watch from one of them would replay or miss changes). The operator chooses the bump from
// what it saw; the store's record outlives the operator and the cluster, and catches a number
// given by hand that is too small. A bump of 0 (spec.revisionBump None) is the user's word that
// no client of the old cluster will connect, and is not checked; nor is a series whose store
// holds no watermark, or whose watermarks cannot be read (said in the agent's log).
func BumpPassesWatermark(ctx context.Context, source *storage.Destination, dir string, snapshotRevision, bump int64) error {
	if bump == 0 {
		return nil
	}
	w, found, err := archive.HighestServed(ctx, source, source.Prefix()+dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "the series' watermarks under %s could not be read, the revision bump is not checked against them: %v\n", source.URI(source.Prefix()+dir), err)
		return nil
	}
	if !found || snapshotRevision+bump > w.HighestRevision {
		return nil
	}
	return permanentError{fmt.Errorf("the watermark in %s says the cluster had served revision %d (recorded %s), and the snapshot's revision %d plus the revision bump %d does not pass it: "+
		"clients may hold revisions the restored cluster would give out again with other data; nothing was restored. "+
		"Set spec.revisionBump to %d or more, or to None if no client of the old cluster will connect to the restored one",
		source.URI(source.Prefix()+dir), w.HighestRevision, w.Time.UTC().Format(time.RFC3339), snapshotRevision, bump, w.HighestRevision-snapshotRevision+1)}
}

// plaintextOf is the snapshot stream r of key as etcdutl reads it: r itself for a plain
// snapshot, else its decryption with cfg.Keys. An encrypted snapshot without a key to open it
// is refused for good, naming the key it needs (from its metadata); it is not unrestorable:
// given the key, it restores.
func plaintextOf(ctx context.Context, cfg FetchConfig, key string, r io.Reader) (io.Reader, error) {
	stream, encrypted, err := encryption.Peek(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.Source.URI(key), err)
	}
	if !encrypted {
		return stream, nil
	}
	keyID := recordedKeyID(ctx, cfg.Source, key)
	if cfg.Keys == nil {
		return nil, permanentError{fmt.Errorf("%s is encrypted to key %s and no Secret of keys was given to decrypt it: name one that holds the key (an EtcdRestore's source.encryption.secretName, an EtcdBackup's spec.encryption.secretName); nothing was restored",
			cfg.Source.URI(key), orUnknown(keyID))}
	}
	plain, err := cfg.Keys.Decrypt(stream, keyID)
	if err != nil {
		return nil, permanentError{fmt.Errorf("%s: %w; nothing was restored", cfg.Source.URI(key), err)}
	}
	return plain, nil
}

// recordedKeyID is the key id an encrypted snapshot's metadata records, or "" when it does not
// say (the snapshot is still decrypted with whichever key opens it).
func recordedKeyID(ctx context.Context, source *storage.Destination, key string) string {
	metadata, err := source.Metadata(ctx, key)
	if err != nil {
		return ""
	}
	return metadata[encryption.MetadataKeyID]
}

func orUnknown(keyID string) string {
	if keyID == "" {
		return "(not recorded)"
	}
	return keyID
}

// freeBytes is the space left to an unprivileged writer on the filesystem of dir.
var freeBytes = func(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// roomToRestore fails the fetch, for good, when the volume holding the staged snapshot has no
// room for what etcdutl writes beside it: otherwise etcdutl would run out of space part-way,
// and a Job run again would meet the same volume. The claim's requested size is checked by the
// operator before anything starts; this is the volume as mounted (a provisioner may give more,
// or share a disk that others fill).
func roomToRestore(dir string, snapshotBytes int64) error {
	free, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("read the free space of %s: %w", dir, err)
	}
	if more := jobspec.RestoreNeedsBytes(snapshotBytes) - snapshotBytes; free < more {
		return permanentError{fmt.Errorf("the volume of %s has %d bytes free once the %d-byte snapshot is staged; restoring it needs %d more (the database restored from it and etcd's first WAL segment), %d in all: give the members' claims at least that (spec.storage.size); nothing was restored",
			dir, free, snapshotBytes, more, jobspec.RestoreNeedsBytes(snapshotBytes))}
	}
	return nil
}

// emptyDir removes dir, or only what it holds when keep is set.
func emptyDir(dir string, keep bool) error {
	if !keep {
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// unrestorableError is a snapshot that is there but cannot be restored: it differs from its
// record or is no etcd snapshot. Permanent, as any retry would find the same bytes.
type unrestorableError struct{ error }

func (e unrestorableError) Unwrap() error { return permanentError(e) }

// IsUnrestorable says whether err is for a snapshot that is there but cannot be restored.
func IsUnrestorable(err error) bool {
	var u unrestorableError
	return errors.As(err, &u)
}

// openFirstThatExists opens cfg.Key or, if it no longer exists, the first of cfg.Fallbacks
// that does, and returns its key (with the source's prefix), the sha256 it must have, and the
// URIs of those before it that did not exist. Only a snapshot that is not there is skipped:
// one that is there but corrupt fails the fetch, as does any other error, rather than
// restoring older data than asked for.
func openFirstThatExists(ctx context.Context, cfg FetchConfig) (io.ReadCloser, string, string, []string, error) {
	var missing []string
	for _, s := range append([]jobspec.Snapshot{{Key: cfg.Key, SHA256: cfg.SHA256}}, cfg.Fallbacks...) {
		key := cfg.Source.Prefix() + s.Key
		r, err := cfg.Source.Open(ctx, key)
		if storage.IsNotFound(err) {
			missing = append(missing, cfg.Source.URI(key))
			continue
		}
		if err != nil {
			return nil, "", "", nil, err
		}
		return r, key, s.SHA256, missing, nil
	}
	if len(missing) == 1 {
		return nil, "", "", nil, permanentError{fmt.Errorf("%s does not exist; nothing was restored", missing[0])}
	}
	return nil, "", "", nil, permanentError{fmt.Errorf("none of the snapshots to restore exists any more (%s); nothing was restored", strings.Join(missing, ", "))}
}

// SnapshotRevision is the newest revision in an etcd snapshot file.
func SnapshotRevision(file string) (int64, error) {
	db, err := bolt.Open(file, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		rev, err = lastRevision(tx)
		return err
	})
	return rev, err
}

// lastRevision is the main revision of the last key of the "key" bucket, where etcd's MVCC
// store keys every change by revision; 0 for an empty keyspace.
func lastRevision(tx *bolt.Tx) (int64, error) {
	b := tx.Bucket([]byte("key"))
	if b == nil {
		return 0, errors.New("no key bucket")
	}
	k, _ := b.Cursor().Last()
	if len(k) < 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(k[:8])), nil
}

// Install moves the data directory etcdutl restored into the member's data directory and
// removes the staging directory. An existing data directory is never replaced: a Job run
// again over live data does nothing to it.
func Install(staged, dataDir, stagingDir string) error {
	if _, err := os.Stat(dataDir); err == nil {
		return permanentError{fmt.Errorf("%s already holds data; a restore never replaces it", dataDir)}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(staged, dataDir); err != nil {
		return fmt.Errorf("move the restored data into place: %w", err)
	}
	return os.RemoveAll(stagingDir)
}
