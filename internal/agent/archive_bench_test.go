//go:build linux

package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
)

// archiveProcessEnv turns the test binary into the archiver, `manager agent archive` as its
// Deployment runs it, until SIGTERM.
const archiveProcessEnv = "AGENT_BENCH_ARCHIVE"

func archiveProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return agent.RunArchive(ctx)
}

// archiveBenchSegmentDuration is the shortest the API allows: the last segment after the
// workload closes this long after its first revision, which the catch-up time includes.
const archiveBenchSegmentDuration = 5 * time.Second

// archiveBenchValueSize is the size of the workload's values: random, so incompressible.
const archiveBenchValueSize = 1024

// BenchmarkArchiverMemory: the archiver (its own process, started as its Deployment starts it,
// archiving to a real S3 server) follows a put workload of 64 MiB of 1 KiB random values from
// 8 writers, beside the plainest follower of the same workload, `etcdctl watch --prefix ""`
// writing to /dev/null, both started before the workload. At two segment sizes, the default
// 16 MiB and 4 MiB, segments closed at the latest 5 s after their first revision (the least
// the API allows). Reports each follower's peak RSS (VmHWM, read from /proc before it is
// stopped), the workload's put rate, the archive's rate (the values' bytes over the time from
// the workload's start until every revision is written, 10^6 bytes per second), and how long
// the archive took to catch up after the last put.
func BenchmarkArchiverMemory(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" || os.Getenv("VERSITYGW") == "" {
		b.Skip("ETCD_BIN and VERSITYGW are not set: run through `make bench`, which builds etcd and the S3 server")
	}
	etcdctl := filepath.Join(filepath.Dir(etcdtest.Binary(b)), "etcdctl")
	const workloadMiB = 64
	for _, segmentMiB := range []int64{16, 4} {
		b.Run(fmt.Sprintf("segment=%dMiB", segmentMiB), func(b *testing.B) {
			var archiverPeak, watchPeak int64
			var putTime, archiveTime, catchUp time.Duration
			for i := 0; i < b.N; i++ {
				server := etcdtest.StartCluster(b, 1)[0]
				srv := s3test.Start(b)
				statusAddr := etcdtest.FreeAddr(b)
				archiver := startArchiverProcess(b, server, srv, srv.Bucket(b, fmt.Sprintf("archive-%d", i)), statusAddr, segmentMiB<<20)
				watch := exec.Command(etcdctl, "--endpoints", server.ClientURL, "watch", "--prefix", "")
				if err := watch.Start(); err != nil {
					b.Fatal(err)
				}
				waitLineage(b, statusAddr)
				start := time.Now()
				last := putWorkload(b, server, workloadMiB)
				putDone := time.Now()
				waitStatus(b, statusAddr, func(s agent.ArchiveStatus) bool {
					n := len(s.Ranges)
					return n > 0 && s.Ranges[n-1].Last.Revision >= last && s.LagSeconds == 0
				})
				archived := time.Now()
				archiverPeak = max(archiverPeak, vmHWM(b, archiver.Process.Pid))
				watchPeak = max(watchPeak, vmHWM(b, watch.Process.Pid))
				_ = archiver.Process.Signal(syscall.SIGTERM)
				_ = watch.Process.Kill()
				_ = archiver.Wait()
				_ = watch.Wait()
				putTime += putDone.Sub(start)
				archiveTime += archived.Sub(start)
				catchUp += archived.Sub(putDone)
				server.Stop()
			}
			bytes := float64(b.N) * workloadMiB * (1 << 20)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(archiverPeak)/mib, "archiver-peak-RSS-MiB")
			b.ReportMetric(float64(watchPeak)/mib, "etcdctl-watch-peak-RSS-MiB")
			b.ReportMetric(bytes/1e6/putTime.Seconds(), "put-MB/s")
			b.ReportMetric(bytes/1e6/archiveTime.Seconds(), "archived-MB/s")
			b.ReportMetric(catchUp.Seconds()/float64(b.N), "catch-up-s")
		})
	}
}

// startArchiverProcess starts the test binary as the archiver of series nightly, writing to
// bucket, reporting on statusAddr; it is killed when the benchmark ends.
func startArchiverProcess(b *testing.B, server *etcdtest.Server, srv *s3test.Server, bucket, statusAddr string, segmentBytes int64) *exec.Cmd {
	b.Helper()
	cfg, err := json.Marshal(jobspec.JobConfig{
		Namespace: nightly.Namespace, Cluster: nightly.Cluster, Backup: nightly.Backup, BackupUID: nightly.UID,
		Endpoints: []string{server.ClientURL},
		Storage: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: bucket, Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true, CredentialsSecretName: "bench",
		}},
		SegmentDuration: archiveBenchSegmentDuration, SegmentMaxBytes: segmentBytes, RestoreMark: "bench", StatusAddr: statusAddr,
	})
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), archiveProcessEnv+"=1", jobspec.ConfigEnv+"="+string(cfg),
		jobspec.AccessKeyIDEnv+"="+s3test.AccessKey, jobspec.SecretAccessKeyEnv+"="+s3test.SecretKey)
	logFile, err := os.Create(filepath.Join(b.TempDir(), "archiver.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = logFile.Close() })
	return cmd
}

func waitLineage(b *testing.B, statusAddr string) {
	b.Helper()
	waitStatus(b, statusAddr, func(s agent.ArchiveStatus) bool { return s.Lineage != "" })
}

// waitStatus polls the archiver's /status until done says so.
func waitStatus(b *testing.B, statusAddr string, done func(agent.ArchiveStatus) bool) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	var last agent.ArchiveStatus
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + statusAddr + "/status")
		if err == nil {
			last = agent.ArchiveStatus{}
			err = json.NewDecoder(resp.Body).Decode(&last)
			resp.Body.Close()
			if err == nil && done(last) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("the archiver did not get there in 10 minutes: %+v", last)
}

// putWorkload puts sizeMiB of archiveBenchValueSize random values from fillWorkers writers,
// each value its own, and returns the last revision.
func putWorkload(b *testing.B, server *etcdtest.Server, sizeMiB int) int64 {
	b.Helper()
	c := server.Client(b)
	n := int64(sizeMiB * mib / archiveBenchValueSize)
	values := make([]byte, n*archiveBenchValueSize)
	_, _ = rand.Read(values)
	var next, last atomic.Int64
	errs := make(chan error, fillWorkers)
	var wg sync.WaitGroup
	for range fillWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				resp, err := c.Put(context.Background(), fmt.Sprintf("put/%07d", i), string(values[i*archiveBenchValueSize:(i+1)*archiveBenchValueSize]))
				if err != nil {
					errs <- err
					return
				}
				for rev := last.Load(); resp.Header.Revision > rev && !last.CompareAndSwap(rev, resp.Header.Revision); rev = last.Load() {
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return last.Load()
}

// vmHWM is process pid's peak RSS.
func vmHWM(b *testing.B, pid int) int64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if kib, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kib), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n * 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
