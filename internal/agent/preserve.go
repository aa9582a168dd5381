package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Before the operator restarts the survivor of a quorum lost for good with --force-new-cluster,
// which rewrites the member's data, a preserve-data Job copies that member's whole data
// directory onto a claim of its own: first do no harm. It copies files (the WAL, the snapshots,
// the db) rather than taking an etcd snapshot: that needs neither a quorum nor the cluster's
// credentials, and keeps the WAL entries the db has not applied yet.
const (
	// PreservedMarker, inside a finished copy, is its PreservedData as JSON. It is written
	// before the copy takes its final name, so a directory of that name without it was not
	// made by the agent.
	PreservedMarker = "etcd-operator-preserved.json"
	// partialSuffix names a copy under way; whatever an attempt left under it, the next removes.
	partialSuffix = ".partial"
	// sourceLockWait bounds the wait for a shared lock on the member's db, which etcd holds
	// exclusively while it runs. The operator stops the member before it starts the Job: a lock
	// held this long is an etcd still running, whose db would be copied torn.
	sourceLockWait = 5 * time.Second
)

// dbPath is the bbolt database inside an etcd data directory.
var dbPath = filepath.Join("member", "snap", "db")

// PreservedData is a finished copy of a member's data directory and what its db holds.
type PreservedData struct {
	Member string `json:"member"`
	// Path of the copy inside the recovery claim, from the claim's root: a data directory etcd
	// can run from.
	Path      string `json:"path"`
	Files     int    `json:"files"`
	SizeBytes int64  `json:"sizeBytes"`
	// DBSHA256 is the sha256 of member/snap/db.
	DBSHA256 string `json:"dbSHA256"`
	// RaftIndex is the raft index the db had applied (etcd's consistent index). A member that
	// did not stop cleanly may hold later entries in its WAL, which etcd applies when it starts.
	RaftIndex uint64 `json:"raftIndex"`
	// Revision is the newest revision in the db; 0 for a keyspace never written.
	Revision       int64     `json:"revision"`
	CompletionTime time.Time `json:"completionTime"`
}

// PreserveData copies the etcd data directory dataDir to claimRoot/member, never writing to
// dataDir. The copy is made under claimRoot/member.partial, synced, marked with its
// PreservedData and only then renamed: claimRoot/member, once there, is whole. A copy already
// finished is not made again; its recorded result is returned.
func PreserveData(member, dataDir, claimRoot string, now func() time.Time) (PreservedData, error) {
	if member == "" || member == "." || member == ".." || member != filepath.Base(member) {
		return PreservedData{}, permanentError{fmt.Errorf("member %q cannot name a directory", member)}
	}
	final := filepath.Join(claimRoot, member)
	if done, found, err := finishedCopy(final); found || err != nil {
		return done, err
	}
	unlock, err := lockShared(filepath.Join(dataDir, dbPath))
	if err != nil {
		return PreservedData{}, err
	}
	defer unlock()

	partial := final + partialSuffix
	if err := os.RemoveAll(partial); err != nil {
		return PreservedData{}, fmt.Errorf("remove the unfinished copy %s: %w", partial, err)
	}
	copied, err := copyTree(dataDir, partial)
	if err != nil {
		return PreservedData{}, fmt.Errorf("copy %s to %s: %w", dataDir, partial, err)
	}
	raftIndex, revision, err := dbIndexes(filepath.Join(partial, dbPath))
	if err != nil {
		return PreservedData{}, permanentError{fmt.Errorf("%s is not a readable etcd db: %w", filepath.Join(dataDir, dbPath), err)}
	}
	done := PreservedData{
		Member: member, Path: member,
		Files: copied.files, SizeBytes: copied.bytes, DBSHA256: copied.dbSHA256,
		RaftIndex: raftIndex, Revision: revision,
		CompletionTime: now().UTC(),
	}
	marker, err := json.Marshal(done)
	if err != nil {
		return PreservedData{}, err
	}
	if err := writeSynced(filepath.Join(partial, PreservedMarker), marker); err != nil {
		return PreservedData{}, fmt.Errorf("mark the copy finished: %w", err)
	}
	// Every entry is synced before the rename makes the copy count as finished.
	for _, dir := range slices.Backward(copied.dirs) {
		if err := syncDir(dir); err != nil {
			return PreservedData{}, err
		}
	}
	if err := os.Rename(partial, final); err != nil {
		return PreservedData{}, fmt.Errorf("name the finished copy: %w", err)
	}
	if err := syncDir(claimRoot); err != nil {
		return PreservedData{}, err
	}
	return done, nil
}

// finishedCopy reads the marker of the copy at dir, if dir exists.
func finishedCopy(dir string) (PreservedData, bool, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return PreservedData{}, false, nil
	} else if err != nil {
		return PreservedData{}, false, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, PreservedMarker))
	if err != nil {
		return PreservedData{}, false, permanentError{fmt.Errorf("%s exists but is not a copy the agent finished, and is left as it is: %w", dir, err)}
	}
	var done PreservedData
	if err := json.Unmarshal(raw, &done); err != nil {
		return PreservedData{}, false, permanentError{fmt.Errorf("%s: %w", filepath.Join(dir, PreservedMarker), err)}
	}
	return done, true, nil
}

// lockShared takes a shared lock on the member's db, as bbolt does for a read-only open, and
// returns its release. It fails while etcd runs on the data (which holds it exclusively).
func lockShared(db string) (func(), error) {
	f, err := os.Open(db)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, permanentError{fmt.Errorf("%s does not exist: the member's claim holds no etcd data", db)}
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(sourceLockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", db, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("%s is still locked after %s: the member's etcd still runs", db, sourceLockWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type treeCopy struct {
	files    int
	bytes    int64
	dbSHA256 string
	// dirs made, parents first.
	dirs []string
}

// copyTree copies the directories and regular files under src to dst, which must not exist.
func copyTree(src, dst string) (treeCopy, error) {
	var out treeCopy
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			out.dirs = append(out.dirs, target)
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type().IsRegular():
			var sum hash.Hash
			if rel == dbPath {
				sum = sha256.New()
			}
			n, err := copyFile(path, target, info.Mode().Perm(), sum)
			if err != nil {
				return err
			}
			if sum != nil {
				out.dbSHA256 = hex.EncodeToString(sum.Sum(nil))
			}
			out.files++
			out.bytes += n
			return nil
		default:
			return permanentError{fmt.Errorf("%s is neither a file nor a directory (%s): not etcd data", path, d.Type())}
		}
	})
	return out, err
}

// copyFile copies src to the new file dst and syncs it, writing what it copies to sum as well
// unless sum is nil.
func copyFile(src, dst string, perm fs.FileMode, sum io.Writer) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return 0, err
	}
	w := io.Writer(out)
	if sum != nil {
		w = io.MultiWriter(out, sum)
	}
	n, err := io.Copy(w, in)
	if err == nil {
		err = out.Sync()
	}
	if closeErr := out.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return n, fmt.Errorf("copy %s: %w", src, err)
	}
	return n, nil
}

func writeSynced(file string, data []byte) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// syncDir makes the entries of dir durable: a file synced is not yet found after a crash
// unless its directory is synced too.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// dbIndexes reads an etcd db read-only: the raft index it has applied, which etcd keeps as
// consistent_index (8 bytes, big-endian) in its meta bucket, and its newest revision.
func dbIndexes(file string) (uint64, int64, error) {
	db, err := bolt.Open(file, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	var index uint64
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			return errors.New("no meta bucket")
		}
		v := meta.Get([]byte("consistent_index"))
		if len(v) != 8 {
			return fmt.Errorf("consistent_index is %d bytes, not 8", len(v))
		}
		index = binary.BigEndian.Uint64(v)
		var err error
		rev, err = lastRevision(tx)
		return err
	})
	return index, rev, err
}
