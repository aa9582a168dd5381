package storage_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

func openS3(t *testing.T, srv *s3test.Server, bucket, secret string) *storage.Destination {
	t.Helper()
	d, err := storage.OpenS3(t.Context(), storage.S3{
		Bucket: bucket, Prefix: "etcd/", Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretKey: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// bothDestinations is a bucket on a real S3 server and a directory, as a PVC is mounted.
func bothDestinations(t *testing.T) map[string]*storage.Destination {
	t.Helper()
	srv := s3test.Start(t)
	dir, err := storage.OpenDir(t.TempDir(), "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*storage.Destination{"s3": openS3(t, srv, srv.Bucket(t, "backups"), s3test.SecretKey), "pvc": dir}
}

// Both destinations behave the same: a streamed upload is verified by reading it back, listed
// under its prefix, and deleted idempotently.
func TestUploadVerifyListDelete(t *testing.T) {
	for name, d := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			data := make([]byte, 3<<20+17) // several multipart chunks and an odd tail
			_, _ = rand.Read(data)
			sum := sha256.Sum256(data)
			key := "etcd/main-20260301T120000Z-r42.db"
			if err := d.Upload(t.Context(), key, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			got, err := d.Verify(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if got.SizeBytes != int64(len(data)) || got.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("verified %d bytes %s; uploaded %d bytes %x", got.SizeBytes, got.SHA256, len(data), sum)
			}
			listed, err := d.List(t.Context(), "etcd/main-")
			if err != nil || len(listed) != 1 || listed[0].Key != key {
				t.Fatalf("list: %+v, %v", listed, err)
			}
			if err := d.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
			if err := d.Delete(t.Context(), key); err != nil {
				t.Fatalf("deleting twice: %v", err)
			}
			if listed, _ := d.List(t.Context(), "etcd/"); len(listed) != 0 {
				t.Fatalf("left after delete: %+v", listed)
			}
		})
	}
}

// failingReader yields some bytes, then fails, as a snapshot stream cut off mid-way does.
type failingReader struct{ left int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, errors.New("snapshot stream broken")
	}
	n := min(len(p), f.left)
	f.left -= n
	return n, nil
}

func TestAFailedUploadLeavesNothing(t *testing.T) {
	for name, d := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			err := d.Upload(t.Context(), "etcd/partial.db", &failingReader{left: 6 << 20})
			if err == nil {
				t.Fatal("an upload whose source failed succeeded")
			}
			if listed, _ := d.List(t.Context(), "etcd/"); len(listed) != 0 {
				t.Fatalf("a partial object was left: %+v", listed)
			}
		})
	}
}

func TestWrongCredentialsAndMissingBucketArePermanent(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "backups")
	for name, d := range map[string]*storage.Destination{
		"wrong secret":   openS3(t, srv, bucket, "not-the-secret"),
		"missing bucket": openS3(t, srv, "no-such-bucket", s3test.SecretKey),
	} {
		t.Run(name, func(t *testing.T) {
			err := d.Upload(t.Context(), "etcd/x.db", bytes.NewReader([]byte("x")))
			if err == nil || !storage.IsPermanent(err) {
				t.Fatalf("upload: %v; want a permanent error", err)
			}
			// Store takes a refusal for one of its checksums and tries again without them:
			// the second refusal is still the user's to fix.
			for _, size := range []int{1, 9 << 20} {
				_, err = d.Store(t.Context(), "etcd/x.db", nil, storage.StoreOptions{}, writeAll(make([]byte, size)))
				if err == nil || !storage.IsPermanent(err) {
					t.Fatalf("store of %d bytes: %v; want a permanent error", size, err)
				}
			}
		})
	}
}

func TestUnreachableServerIsTransient(t *testing.T) {
	srv := s3test.Start(t)
	d := openS3(t, srv, srv.Bucket(t, "backups"), s3test.SecretKey)
	srv.Stop()
	err := d.Upload(t.Context(), "etcd/x.db", io.LimitReader(rand.Reader, 1024))
	if err == nil || storage.IsPermanent(err) {
		t.Fatalf("upload to a stopped server: %v; want a transient error", err)
	}
}

// An upload into a directory syncs everything it leaves on disk: the object, the attribute
// file the library keeps its metadata in (a snapshot's keyspace record), and the directories
// naming them, up to the destination's own. Before, the attribute file was not synced.
func TestAnUploadIntoADirectorySyncsAllItWrote(t *testing.T) {
	root := t.TempDir()
	d, err := storage.OpenDir(root, "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	key := "etcd/db/main/nightly/20260301T120000Z-r42.db"
	if err := d.UploadWithMetadata(t.Context(), key, bytes.NewReader([]byte("snapshot")), map[string]string{"revision": "42"}); err != nil {
		t.Fatal(err)
	}
	synced := storage.PathsToSync(root, key)
	err = filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !slices.Contains(synced, path) {
			t.Errorf("the upload wrote %s and does not sync it (it syncs %q)", path, synced)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if meta, err := d.Metadata(t.Context(), key); err != nil || meta["revision"] != "42" {
		t.Fatalf("metadata read back: %v, %v", meta, err)
	}
}
