package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// writeFile writes what write writes into key's file in a directory destination, hashing it
// on the way, with os.File rather than the library's writer, which hashes every write with
// MD5 for an attribute nothing here reads (28 % of a backup's CPU to a directory). The file
// is written under a temporary name, synced, and renamed into place after its attribute
// file, then every directory up to the destination's is synced: the object appears only
// once whole and durable, and a failure leaves nothing under key.
func (d *Destination) writeFile(ctx context.Context, key string, metadata map[string]string, write func(io.Writer) error) (streamed, error) {
	if err := plainKey(key); err != nil {
		return streamed{}, err
	}
	path := filepath.Join(d.dir, filepath.FromSlash(key))
	// The library's modes: 0777 and 0666 before the umask, as its own writer makes them.
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return streamed{}, fmt.Errorf("write %s: %w", key, err)
	}
	// The library's temporary name, which its listing shows but no snapshot name matches.
	temp := path + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + ".tmp"
	f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return streamed{}, fmt.Errorf("write %s: %w", key, err)
	}
	defer func() { _ = os.Remove(temp) }() // after the rename, there is nothing to remove
	sent, err := writeChunks(ctx, f, write)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return streamed{}, fmt.Errorf("write %s: %w", key, err)
	}
	if err := writeAttributes(path, metadata); err != nil {
		return streamed{}, fmt.Errorf("write the attributes of %s: %w", key, err)
	}
	if err := os.Rename(temp, path); err != nil {
		_ = os.Remove(path + attributesFileSuffix)
		return streamed{}, fmt.Errorf("write %s: %w", key, err)
	}
	if err := syncDirs(d.dir, key); err != nil {
		return streamed{}, err
	}
	return sent, nil
}

// A file is written in chunks of fileChunkSize, up to fileChunks of them in memory: while one
// goes to the file, the next is filled and hashed, on the other core.
const (
	fileChunkSize = 1 << 20
	fileChunks    = 4
)

// writeChunks writes what write writes into f, hashing it on write's goroutine and writing it
// to f on another, and returns what was written.
func writeChunks(ctx context.Context, f *os.File, write func(io.Writer) error) (streamed, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newPartWriter(ctx, fileChunkSize, fileChunks)
	written := make(chan struct{})
	go func() {
		defer close(written)
		failed := false
		for buf := range w.full {
			if !failed {
				if _, err := f.Write(buf); err != nil {
					failed = true
					cancel(err)
				}
			}
			w.free <- buf
		}
	}()
	err := write(w)
	if err == nil {
		err = w.finish()
	}
	if err != nil {
		cancel(err)
	}
	close(w.full)
	<-written
	// The first failure, write's or the file's: the other only saw it as its cancellation.
	if cause := context.Cause(ctx); cause != nil {
		return streamed{}, cause
	}
	return streamed{size: w.n, sha256: w.whole.Sum(nil)}, nil
}

// fileAttributes is the library's attribute file (fileblob's ".attrs" sidecar, JSON), as
// its reader decodes it: what Metadata and the restore read of a directory's snapshot.
type fileAttributes struct {
	ContentType string            `json:"user.content_type"`
	Metadata    map[string]string `json:"user.metadata"`
}

// writeAttributes writes path's attribute file, synced, under a temporary name renamed into
// place: a snapshot's keyspace record must survive the node losing power, as the snapshot.
func writeAttributes(path string, metadata map[string]string) error {
	raw, err := json.Marshal(fileAttributes{ContentType: "application/octet-stream", Metadata: metadata})
	if err != nil {
		return err
	}
	final := path + attributesFileSuffix
	temp := final + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + ".tmp"
	f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(temp) }()
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	return os.Rename(temp, final)
}

// syncDirs syncs every directory from key's file's up to dir: their entries name the file, its
// attribute file and the directories just made.
func syncDirs(dir, key string) error {
	for _, path := range pathsToSync(dir, key)[2:] {
		if err := syncPath(path); err != nil {
			return err
		}
	}
	return nil
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	err = f.Sync()
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// fileSize is the size of key's file as the file system reports it.
func (d *Destination) fileSize(key string) (int64, error) {
	fi, err := os.Stat(filepath.Join(d.dir, filepath.FromSlash(key)))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%s is gone after its upload", d.URI(key))
	}
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", d.URI(key), err)
	}
	return fi.Size(), nil
}
