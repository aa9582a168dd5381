package storage_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

const storeKey = "etcd/db/main/nightly/20260301T120000Z-r42.db"

// Sizes Store takes apart differently: an empty stream, one PutObject, a multipart upload of
// exactly one part, and several parts with an odd tail (more than the buffers held at once).
var storeSizes = map[string]int{"empty": 0, "small": 1000, "one part": 8 << 20, "parts": 4*(8<<20) + 17}

func randomBytes(n int) []byte {
	data := make([]byte, n)
	_, _ = rand.Read(data)
	return data
}

// writeAll is a Store write that writes data in etcd's stream's chunks.
func writeAll(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.CopyBuffer(w, bytes.NewReader(data), make([]byte, 32<<10))
		return err
	}
}

// Store leaves what was streamed, with its metadata, and says how the destination vouched for
// it: the S3 store's sha256 checksums, a directory's size after the sync; a read-back when
// asked.
func TestStoreChecksWhatTheDestinationHolds(t *testing.T) {
	metadata := map[string]string{"etcd-revision": "42", "encryption-key-id": "team keys/2026 #1"}
	for name, d := range bothDestinations(t) {
		for sizeName, size := range storeSizes {
			for _, readBack := range []bool{false, true} {
				t.Run(name+"/"+sizeName+"/readBack="+map[bool]string{false: "no", true: "yes"}[readBack], func(t *testing.T) {
					data := randomBytes(size)
					sum := sha256.Sum256(data)
					stored, err := d.Store(t.Context(), storeKey, metadata, storage.StoreOptions{ReadBack: readBack}, writeAll(data))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = d.Delete(t.Context(), storeKey) })
					want := map[string]storage.Check{"s3": storage.CheckStoreChecksum, "pvc": storage.CheckSizeAfterSync}[name]
					if readBack {
						want = storage.CheckReadBack
					}
					if stored.Check != want || stored.Why != "" {
						t.Errorf("checked by %q (%s), want %q", stored.Check, stored.Why, want)
					}
					if stored.SizeBytes != int64(size) || stored.SHA256 != hex.EncodeToString(sum[:]) || stored.Key != storeKey {
						t.Errorf("stored %+v; streamed %d bytes sha256 %x", stored, size, sum)
					}
					read, err := d.Verify(t.Context(), storeKey)
					if err != nil || read.SizeBytes != stored.SizeBytes || read.SHA256 != stored.SHA256 {
						t.Errorf("read back %+v, %v; stored %+v", read, err, stored)
					}
					if got, err := d.Metadata(t.Context(), storeKey); err != nil || !equalMaps(got, metadata) {
						t.Errorf("metadata read back %v, %v; stored %v", got, err, metadata)
					}
				})
			}
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Each check fails when the destination does not hold what was streamed, and what it holds is
// deleted: an S3 object replaced by other data of the same size (the store's checksum
// differs) or a byte short (the size), a file a byte short, and, read back, either with a
// byte changed.
func TestStoreFailsAndDeletesWhatTheDestinationDoesNotHold(t *testing.T) {
	for name, d := range bothDestinations(t) {
		for _, c := range []struct {
			name     string
			readBack bool
			alter    func(t *testing.T, d *storage.Destination, key string, data []byte)
			only     string
		}{
			{name: "other data of the same size", alter: replaceWith(flipFirstByte), only: "s3"},
			{name: "a byte short", alter: replaceWith(func(data []byte) []byte { return data[:len(data)-1] }), only: "s3"},
			{name: "a byte short", alter: truncateFile, only: "pvc"},
			{name: "read back with a byte changed", readBack: true, alter: replaceWith(flipFirstByte)},
		} {
			if c.only != "" && c.only != name {
				continue
			}
			for sizeName, size := range storeSizes {
				if size == 0 {
					continue
				}
				t.Run(name+"/"+c.name+"/"+sizeName, func(t *testing.T) {
					data := randomBytes(size)
					storage.BeforeCheck(d, func(key string) {
						storage.BeforeCheck(d, nil)
						c.alter(t, d, key, data)
					})
					t.Cleanup(func() { storage.BeforeCheck(d, nil) })
					stored, err := d.Store(t.Context(), storeKey, nil, storage.StoreOptions{ReadBack: c.readBack}, writeAll(data))
					if err == nil || !strings.Contains(err.Error(), "were streamed") {
						t.Fatalf("stored %+v, %v; want the check failed", stored, err)
					}
					if listed, _ := d.List(t.Context(), "etcd/"); len(listed) != 0 {
						t.Fatalf("what does not hold the stream is left: %+v", listed)
					}
				})
			}
		}
	}
}

// replaceWith replaces the object with alter(data), stored and checked by Store itself: to
// the S3 store, an object as genuine as the first, with checksums of its own.
func replaceWith(alter func([]byte) []byte) func(t *testing.T, d *storage.Destination, key string, data []byte) {
	return func(t *testing.T, d *storage.Destination, key string, data []byte) {
		t.Helper()
		if _, err := d.Store(t.Context(), key, nil, storage.StoreOptions{}, writeAll(alter(slices.Clone(data)))); err != nil {
			t.Fatal(err)
		}
	}
}

func flipFirstByte(data []byte) []byte {
	data[0] ^= 0xff
	return data
}

// truncateFile cuts a directory destination's file by a byte, as a disk that lost its tail.
func truncateFile(t *testing.T, d *storage.Destination, key string, data []byte) {
	t.Helper()
	if err := os.Truncate(storage.FilePath(d, key), int64(len(data)-1)); err != nil {
		t.Fatal(err)
	}
}

// A failed write leaves nothing: no object, no attribute file, no temporary file, and no
// multipart upload the S3 store would keep the parts of.
func TestAFailedStoreLeavesNothing(t *testing.T) {
	for name, d := range bothDestinations(t) {
		for sizeName, size := range storeSizes {
			t.Run(name+"/"+sizeName, func(t *testing.T) {
				_, err := d.Store(t.Context(), storeKey, map[string]string{"etcd-revision": "42"}, storage.StoreOptions{}, func(w io.Writer) error {
					if err := writeAll(randomBytes(size))(w); err != nil {
						return err
					}
					return errors.New("snapshot stream broken")
				})
				if err == nil || !strings.Contains(err.Error(), "snapshot stream broken") {
					t.Fatalf("a store whose stream failed: %v", err)
				}
				if listed, _ := d.List(t.Context(), "etcd/"); len(listed) != 0 {
					t.Fatalf("a partial object was left: %+v", listed)
				}
				if pending := storage.PendingUploads(t, d); len(pending) != 0 {
					t.Fatalf("multipart uploads left: %v", pending)
				}
			})
		}
	}
}

// A Store into a directory syncs everything it leaves on disk, as an upload does.
func TestAStoreIntoADirectorySyncsAllItWrote(t *testing.T) {
	root := t.TempDir()
	d, err := storage.OpenDir(root, "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Store(t.Context(), storeKey, map[string]string{"revision": "42"}, storage.StoreOptions{}, writeAll([]byte("snapshot"))); err != nil {
		t.Fatal(err)
	}
	synced := storage.PathsToSync(root, storeKey)
	err = filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !slices.Contains(synced, path) {
			t.Errorf("the store wrote %s and does not sync it (it syncs %q)", path, synced)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checksumHeader says whether a request or response header names an S3 checksum.
func checksumHeader(name string) bool {
	name = strings.ToLower(name)
	return strings.HasPrefix(name, "x-amz-checksum-") || name == "x-amz-sdk-checksum-algorithm"
}

// storeBehind is a destination on a real S3 server reached through a proxy that changes what
// the server says: a store that does not know checksums, as the proxy makes it.
// With stripChecksums, the proxy takes the checksums out of the server's answers to HEAD.
func storeBehind(t *testing.T, stripChecksums bool, proxy func(w http.ResponseWriter, r *http.Request, forward http.Handler)) *storage.Destination {
	t.Helper()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "backups")
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	forward := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the request's signature covers it
		},
		ModifyResponse: func(r *http.Response) error {
			if stripChecksums && r.Request.Method == http.MethodHead {
				for name := range r.Header {
					if checksumHeader(name) {
						r.Header.Del(name)
					}
				}
			}
			return nil
		},
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxy(w, r, forward) }))
	t.Cleanup(server.Close)
	return openS3(t, &s3test.Server{Endpoint: server.URL}, bucket, s3test.SecretKey)
}

// A store that refuses the checksum headers of uploads (with a 400, as a store that does not
// know them may) still takes the backup: the upload goes again without them, and the object
// is read back, which the result says.
func TestAStoreThatRefusesChecksumsIsReadBack(t *testing.T) {
	var refused atomic.Int32
	d := storeBehind(t, false, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		for name := range r.Header {
			if checksumHeader(name) && r.Method != http.MethodGet && r.Method != http.MethodHead {
				refused.Add(1)
				// Read before it is answered: Go's server would otherwise answer a large part
				// early and reset the connection while the client still sends it, which the
				// client sees as a broken connection, not as the store's answer.
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidArgument</Code><Message>Unsupported header `+name+`</Message></Error>`)
				return
			}
		}
		forward.ServeHTTP(w, r)
	})
	for sizeName, size := range storeSizes {
		t.Run(sizeName, func(t *testing.T) {
			refused.Store(0)
			data := randomBytes(size)
			sum := sha256.Sum256(data)
			stored, err := d.Store(t.Context(), storeKey, nil, storage.StoreOptions{}, writeAll(data))
			if err != nil {
				t.Fatal(err)
			}
			if stored.Check != storage.CheckReadBack || !strings.Contains(stored.Why, "refused") || refused.Load() == 0 {
				t.Errorf("checked by %q (%s) after %d refusals; want read back, for the refusal", stored.Check, stored.Why, refused.Load())
			}
			if stored.SizeBytes != int64(size) || stored.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("stored %+v; streamed %d bytes sha256 %x", stored, size, sum)
			}
		})
	}
}

// A store that takes the checksums but reports none for the object is read back, and the
// result says why.
func TestAStoreThatReportsNoChecksumIsReadBack(t *testing.T) {
	d := storeBehind(t, true, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		forward.ServeHTTP(w, r)
	})
	for sizeName, size := range storeSizes {
		t.Run(sizeName, func(t *testing.T) {
			data := randomBytes(size)
			stored, err := d.Store(t.Context(), storeKey, nil, storage.StoreOptions{}, writeAll(data))
			if err != nil {
				t.Fatal(err)
			}
			if stored.Check != storage.CheckReadBack || !strings.Contains(stored.Why, "no checksum") {
				t.Errorf("checked by %q (%s); want read back, for want of a checksum", stored.Check, stored.Why)
			}
		})
	}
}
