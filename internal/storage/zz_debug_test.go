package storage

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/s3test"
)

func cpuOf(t *testing.T, pid int) time.Duration {
	raw, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	f := strings.Fields(string(raw)[strings.LastIndex(string(raw), ")")+2:])
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond
}

func TestZZDebugTiming(t *testing.T) {
	srv := s3test.Start(t)
	b := srv.Bucket(t, "backups")
	d, err := OpenS3(t.Context(), S3{Bucket: b, Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true, AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 300<<20)
	_, _ = rand.Read(data)
	pid := s3test.PID(srv)
	for i := 0; i < 3; i++ {
		c0 := cpuOf(t, pid)
		t0 := time.Now()
		s, err := d.uploadParts(t.Context(), "k", nil, func(w io.Writer) error { _, err := io.CopyBuffer(w, bytes.NewReader(data), make([]byte, 32<<10)); return err })
		t1 := time.Now()
		c1 := cpuOf(t, pid)
		_, _, herr := d.headChecksum(t.Context(), "k")
		t2 := time.Now()
		t.Logf("upload %v (%.0f MB/s) server cpu %v, head %v %v %v", t1.Sub(t0), 300*1.048576/t1.Sub(t0).Seconds(), c1-c0, t2.Sub(t1), err, herr)
		_ = s
		f, _ := os.Create(t.TempDir() + "/x")
		t0 = time.Now()
		_, _ = io.CopyBuffer(f, bytes.NewReader(data), make([]byte, 32<<10))
		_ = f.Sync()
		t.Logf("file %v", time.Since(t0))
	}
}
