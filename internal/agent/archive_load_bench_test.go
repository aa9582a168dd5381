//go:build linux

package agent_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
)

// The load the archiver is measured under: loadWriters writers, each with a client of its own
// to the three members, putting 1 KiB random values (incompressible) under keys of their own
// as fast as the cluster answers, for loadDuration.
var loadWriterCounts = []int{16, 32, 64}

const (
	loadWriters       = 64
	loadAloneDuration = 10 * time.Second
	loadDuration      = 30 * time.Second
	// loadSampleInterval is how often the cluster's revision, the archive's and the archiver's
	// memory are read during the load.
	loadSampleInterval = 500 * time.Millisecond
)

// BenchmarkArchiverUnderLoad: how many puts a 3-member etcd cluster on loopback sustains, and
// whether the archiver keeps up with it. The plainest alternative, side by side in the same run,
// is the cluster alone: a fresh 3-member cluster taking puts from 16, 32 and 64 writers for 10 s
// each, nothing following it (cluster-alone/writers=N). Then a fresh cluster with the archiver
// (its own process, as its Deployment runs it, writing to a real S3 server, segments closed at the
// size given or 5 s after their first revision) following it from an empty keyspace while 64
// writers put for 30 s (archiver/segment=N). Reported for each: the put rate and 1 KiB values'
// MB/s (10^6), the puts' p99 latency; for the archiver also its catch-up (from the last put's
// answer until its revision is in a written segment, as the archiver's /status says), how far
// behind the cluster the archive was during the load at most (the time since the cluster passed
// the newest written revision, read every 0.5 s), its CPU time over the load's (100 % is one
// core), the values' MiB per segment written (a segment closes at its size or after 5 s, whichever
// comes first), its peak RSS (VmHWM), and the highest RSS and live heap after GC (from
// GODEBUG=gctrace=1) in the first and in the second half of the load: the same in both is memory
// flat under a steady load, the second above the first is memory growing with the run.
func BenchmarkArchiverUnderLoad(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" || os.Getenv("VERSITYGW") == "" {
		b.Skip("ETCD_BIN and VERSITYGW are not set: run through `make bench`, which builds etcd and the S3 server")
	}
	values := make([]byte, 8<<20)
	_, _ = rand.Read(values)
	for _, writers := range loadWriterCounts {
		b.Run(fmt.Sprintf("cluster-alone/writers=%d", writers), func(b *testing.B) {
			var puts loadResult
			for i := 0; i < b.N; i++ {
				servers := etcdtest.StartCluster(b, 3)
				puts.add(putLoad(b, etcdtest.ClientURLs(servers), writers, loadAloneDuration, values, func(int64) {}))
				for _, s := range servers {
					s.Stop()
				}
			}
			puts.report(b)
		})
	}
	for _, segmentMiB := range []int64{16, 4} {
		b.Run(fmt.Sprintf("archiver/segment=%dMiB", segmentMiB), func(b *testing.B) {
			var puts loadResult
			var catchUp, cpu time.Duration
			var segments int
			var behind, peak, rssEarly, rssLate, heapEarly, heapLate float64
			for i := 0; i < b.N; i++ {
				servers := etcdtest.StartCluster(b, 3)
				endpoints := etcdtest.ClientURLs(servers)
				srv := s3test.Start(b)
				statusAddr := etcdtest.FreeAddr(b)
				archiver := startLoadArchiver(b, endpoints, srv, srv.Bucket(b, fmt.Sprintf("load-%d", i)), statusAddr, segmentMiB<<20)
				waitLineage(b, statusAddr)
				start := time.Now()
				var samples []loadSample
				var clusterRevision atomic.Int64
				sampling := sampleLoad(statusAddr, archiver.cmd.Process.Pid, &clusterRevision, &samples)
				cpuBefore := processCPU(b, archiver.cmd.Process.Pid)
				run := putLoad(b, endpoints, loadWriters, loadDuration, values, func(rev int64) { atomicMax(&clusterRevision, rev) })
				end := time.Now()
				cpu += processCPU(b, archiver.cmd.Process.Pid) - cpuBefore
				sampling()
				var final agent.ArchiveStatus
				waitStatus(b, statusAddr, func(s agent.ArchiveStatus) bool {
					n := len(s.Ranges)
					final = s
					return n > 0 && s.Ranges[n-1].Last.Revision >= run.last
				})
				catchUp += time.Since(run.lastAnswer)
				segments += final.Segments
				peak = max(peak, float64(vmHWM(b, archiver.cmd.Process.Pid))/mib)
				archiver.stop()
				puts.add(run)
				behind = max(behind, maxBehind(samples).Seconds())
				mid := start.Add(end.Sub(start) / 2)
				early, late := splitAt(samples, mid)
				rssEarly, rssLate = max(rssEarly, highestRSS(early)), max(rssLate, highestRSS(late))
				gcs := archiver.liveHeap(b)
				heapEarly = max(heapEarly, highestHeap(gcs, start, mid))
				heapLate = max(heapLate, highestHeap(gcs, mid, end))
				for _, s := range servers {
					s.Stop()
				}
			}
			puts.report(b)
			b.ReportMetric(catchUp.Seconds()/float64(b.N), "catch-up-s")
			b.ReportMetric(100*cpu.Seconds()/puts.elapsed.Seconds(), "archiver-CPU-%")
			b.ReportMetric(float64(puts.puts)*archiveBenchValueSize/mib/float64(segments), "MiB/segment")
			b.ReportMetric(behind, "max-behind-s")
			b.ReportMetric(peak, "archiver-peak-RSS-MiB")
			b.ReportMetric(rssEarly, "RSS-1st-half-MiB")
			b.ReportMetric(rssLate, "RSS-2nd-half-MiB")
			b.ReportMetric(heapEarly, "live-heap-1st-half-MiB")
			b.ReportMetric(heapLate, "live-heap-2nd-half-MiB")
		})
	}
}

// loadRun is what one put load did: its puts, their latencies, the last revision written and
// when its answer came.
type loadRun struct {
	puts, failed int64
	elapsed      time.Duration
	latencies    []time.Duration
	last         int64
	lastAnswer   time.Time
}

// loadResult adds up a benchmark's runs.
type loadResult struct {
	puts, failed int64
	elapsed      time.Duration
	latencies    []time.Duration
}

func (r *loadResult) add(run loadRun) {
	r.puts += run.puts
	r.failed += run.failed
	r.elapsed += run.elapsed
	r.latencies = append(r.latencies, run.latencies...)
}

func (r *loadResult) report(b *testing.B) {
	slices.Sort(r.latencies)
	var p99 time.Duration
	if n := len(r.latencies); n > 0 {
		p99 = r.latencies[n*99/100]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(r.puts)/r.elapsed.Seconds(), "puts/s")
	b.ReportMetric(float64(r.puts)*archiveBenchValueSize/1e6/r.elapsed.Seconds(), "put-MB/s")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.failed), "failed-puts")
}

// putLoad puts archiveBenchValueSize slices of values from writers writers for duration, each
// with its own client to every endpoint and keys of its own, and tells written each revision
// it is answered with.
func putLoad(b *testing.B, endpoints []string, writers int, duration time.Duration, values []byte, written func(int64)) loadRun {
	b.Helper()
	clients := make([]*clientv3.Client, writers)
	for w := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		clients[w] = c
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var (
		mu  sync.Mutex
		run loadRun
		wg  sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for w, c := range clients {
		wg.Go(func() {
			var mine loadRun
			for n := 0; time.Now().Before(deadline); n++ {
				off := ((w*100003 + n) * archiveBenchValueSize) % (len(values) - archiveBenchValueSize)
				begin := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := c.Put(ctx, fmt.Sprintf("load/%02d/%08d", w, n), string(values[off:off+archiveBenchValueSize]))
				cancel()
				answered := time.Now()
				if err != nil {
					mine.failed++
					continue
				}
				mine.puts++
				mine.latencies = append(mine.latencies, answered.Sub(begin))
				written(resp.Header.Revision)
				if resp.Header.Revision > mine.last {
					mine.last, mine.lastAnswer = resp.Header.Revision, answered
				}
			}
			mu.Lock()
			defer mu.Unlock()
			run.puts += mine.puts
			run.failed += mine.failed
			run.latencies = append(run.latencies, mine.latencies...)
			if mine.last > run.last {
				run.last = mine.last
			}
			if mine.lastAnswer.After(run.lastAnswer) {
				run.lastAnswer = mine.lastAnswer
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	if run.puts == 0 {
		b.Fatalf("no put succeeded in %s (%d failed)", duration, run.failed)
	}
	return run
}

func atomicMax(v *atomic.Int64, n int64) {
	for old := v.Load(); n > old && !v.CompareAndSwap(old, n); old = v.Load() {
	}
}

// loadSample is one look during the load: the cluster's highest revision answered to the
// writers, the archive's last written revision, the archiver's RSS.
type loadSample struct {
	at               time.Time
	cluster, written int64
	rss              int64
}

// sampleLoad reads, every loadSampleInterval until the function it returns is called, the
// cluster's revision, the archive's (its /status) and the archiver's RSS into samples.
func sampleLoad(statusAddr string, pid int, cluster *atomic.Int64, samples *[]loadSample) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(loadSampleInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			s := loadSample{at: time.Now(), cluster: cluster.Load(), rss: vmRSS(pid)}
			if status, err := archiveStatus(statusAddr); err == nil && len(status.Ranges) > 0 {
				s.written = status.Ranges[len(status.Ranges)-1].Last.Revision
			}
			*samples = append(*samples, s)
		}
	}()
	return func() { close(done); <-finished }
}

func archiveStatus(statusAddr string) (agent.ArchiveStatus, error) {
	var s agent.ArchiveStatus
	resp, err := http.Get("http://" + statusAddr + "/status")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&s)
	return s, err
}

// maxBehind is how far behind the cluster the archive was at most: at each sample, the time
// since the first sample at which the cluster had passed the archive's last written revision.
func maxBehind(samples []loadSample) time.Duration {
	var most time.Duration
	for _, s := range samples {
		for _, earlier := range samples {
			if earlier.cluster >= s.written && earlier.cluster > 0 {
				most = max(most, s.at.Sub(earlier.at))
				break
			}
		}
	}
	return most
}

func splitAt(samples []loadSample, mid time.Time) (early, late []loadSample) {
	i, _ := slices.BinarySearchFunc(samples, mid, func(s loadSample, t time.Time) int { return s.at.Compare(t) })
	return samples[:i], samples[i:]
}

func highestRSS(samples []loadSample) float64 {
	var most int64
	for _, s := range samples {
		most = max(most, s.rss)
	}
	return float64(most) / mib
}

// vmRSS is process pid's RSS now; 0 once it is gone.
func vmRSS(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if kib, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kib), " kB"), 10, 64)
			return n * 1024
		}
	}
	return 0
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on every Linux
// architecture Go runs on.
const clockTicks = 100

// processCPU is the CPU time process pid has used so far, in user and kernel mode.
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and may hold spaces:
	// utime and stime are the 14th and 15th fields of the line, the 12th and 13th of these.
	_, rest, _ := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// loadArchiver is the archiver's process, started with GODEBUG=gctrace=1 so that its log says
// the live heap after every collection.
type loadArchiver struct {
	cmd     *exec.Cmd
	started time.Time
	log     string
}

// startLoadArchiver starts the test binary as the archiver of series nightly on endpoints,
// writing to bucket, reporting on statusAddr; it is killed when the benchmark ends.
func startLoadArchiver(b *testing.B, endpoints []string, srv *s3test.Server, bucket, statusAddr string, segmentBytes int64) *loadArchiver {
	b.Helper()
	cfg, err := json.Marshal(jobspec.JobConfig{
		Namespace: nightly.Namespace, Cluster: nightly.Cluster, Backup: nightly.Backup, BackupUID: nightly.UID,
		Endpoints: endpoints,
		Storage: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: bucket, Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true, CredentialsSecretName: "bench",
		}},
		SegmentDuration: archiveBenchSegmentDuration, SegmentMaxBytes: segmentBytes, RestoreMark: "bench", StatusAddr: statusAddr,
	})
	if err != nil {
		b.Fatal(err)
	}
	a := &loadArchiver{cmd: exec.Command(os.Args[0]), log: filepath.Join(b.TempDir(), "archiver.log")}
	a.cmd.Env = append(os.Environ(), archiveProcessEnv+"=1", jobspec.ConfigEnv+"="+string(cfg), "GODEBUG=gctrace=1",
		jobspec.AccessKeyIDEnv+"="+s3test.AccessKey, jobspec.SecretAccessKeyEnv+"="+s3test.SecretKey)
	logFile, err := os.Create(a.log)
	if err != nil {
		b.Fatal(err)
	}
	a.cmd.Stderr = logFile
	a.started = time.Now()
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.cmd.Process.Kill(); _ = logFile.Close() })
	return a
}

func (a *loadArchiver) stop() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}

// gcSample is one collection: when it ended and the heap it left live.
type gcSample struct {
	at   time.Time
	live float64
}

// liveHeap reads the archiver's gctrace lines ("gc N @T s ...: A->B->C MB, ..."): C is the
// live heap after collection N, T its time since the process started.
func (a *loadArchiver) liveHeap(b *testing.B) []gcSample {
	b.Helper()
	f, err := os.Open(a.log)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []gcSample
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) < 3 || fields[0] != "gc" || !strings.HasPrefix(fields[2], "@") {
			continue
		}
		seconds, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(fields[2], "@"), "s"), 64)
		if err != nil {
			continue
		}
		i := slices.Index(fields, "MB,")
		if i < 1 {
			continue
		}
		heaps := strings.Split(fields[i-1], "->")
		live, err := strconv.ParseFloat(heaps[len(heaps)-1], 64)
		if err != nil {
			continue
		}
		out = append(out, gcSample{at: a.started.Add(time.Duration(seconds * float64(time.Second))), live: live})
	}
	return out
}

// highestHeap is the highest live heap after a collection from from to until.
func highestHeap(gcs []gcSample, from, until time.Time) float64 {
	var most float64
	for _, g := range gcs {
		if !g.at.Before(from) && g.at.Before(until) {
			most = max(most, g.live)
		}
	}
	return most
}
