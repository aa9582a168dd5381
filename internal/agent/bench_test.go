//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// Benchmarks of the backup agent against `etcdctl snapshot save` to local disk, on a real etcd
// server and a real S3 server on loopback (`make bench`); docs/performance.md records the
// figures. Each backup runs in a process of its own, as in a Job, so that one run gives both
// its wall time and its peak memory as the kernel accounts it.

const (
	mib = 1 << 20
	// Values stay under etcd's default request limit of 1.5 MiB.
	fillValueSize = mib
	fillWorkers   = 8
	// backupProcessEnv turns the test binary into a one-shot backup agent (see TestMain).
	backupProcessEnv = "AGENT_BENCH_BACKUP"
	// backupProfileEnv, when set to a directory, has each backup process write its CPU profile
	// there (s3-<pid>.pprof, dir-<pid>.pprof): `go test -cpuprofile` would profile the
	// benchmark, not the agents it starts.
	backupProfileEnv = "AGENT_BENCH_CPUPROFILE"
)

// profileCPU profiles this backup process into dir until stop is called.
func profileCPU(dir string, cfg backupProcessConfig) (stop func(), err error) {
	kind := "dir"
	if cfg.Bucket != "" {
		kind = "s3"
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", kind, os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// TestMain runs one backup and exits when the test binary is re-executed by a benchmark with
// backupProcessEnv set; otherwise it runs the tests as usual.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(backupProcessEnv); cfg != "" {
		agent.LimitMemory() // as the agent's entry point does, from the Job's limit runAgent gives
		os.Exit(backupProcess(cfg))
	}
	if os.Getenv(archiveProcessEnv) != "" {
		os.Exit(archiveProcess())
	}
	os.Exit(m.Run())
}

// backupProcessConfig is one backup run by a re-executed test binary: to the S3 bucket if set,
// otherwise into the directory.
type backupProcessConfig struct {
	Endpoints  []string
	S3Endpoint string
	Bucket     string
	Dir        string
	// AgeKey, when set, is the age identity the backup encrypts to (a benchmark's own key).
	AgeKey string `json:",omitempty"`
}

func backupProcess(config string) int {
	var cfg backupProcessConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if dir := os.Getenv(backupProfileEnv); dir != "" {
		stop, err := profileCPU(dir, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
	}
	ctx := context.Background()
	var dest *storage.Destination
	var err error
	if cfg.Bucket != "" {
		dest, err = storage.OpenS3(ctx, storage.S3{
			Bucket: cfg.Bucket, Endpoint: cfg.S3Endpoint, Region: "us-east-1", ForcePathStyle: true,
			AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
		})
	} else {
		dest, err = storage.OpenDir(cfg.Dir, "pvc://bench/")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dest.Close()
	var keys *encryption.Keyring
	if cfg.AgeKey != "" {
		if keys, err = encryption.Parse("bench", map[string][]byte{"bench": []byte(cfg.AgeKey)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	res, err := agent.Backup(ctx, agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: cfg.Endpoints}, Series: backupplan.Series{Namespace: "bench", Cluster: "bench", Backup: "bench", UID: "bench"}, Destination: dest,
		Keys: keys, Now: time.Now,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	peak, err := peakRSS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(backupProcessResult{Backup: res, PeakRSS: peak}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type backupProcessResult struct {
	Backup agent.BackupResult
	// PeakRSS is the process's peak resident set size in bytes.
	PeakRSS int64
}

// peakRSS is this process's VmHWM: the high-water mark of its own memory. Not the ru_maxrss a
// parent gets from wait4: Go starts children with vfork, and the kernel counts the memory they
// share with the parent until exec, so every child would report at least the parent's peak.
func peakRSS() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if kib, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kib), " kB"), 10, 64)
			return n * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// BenchmarkBackup: a backup of a 64 MiB and of a 256 MiB keyspace (and of a 1 GiB one with
// AGENT_BENCH_1GIB=1: its fill and runs take minutes) by the agent, to S3 and to a directory,
// against `etcdctl snapshot save` of the same server to local disk, run in turn in each
// iteration. Reports throughput (snapshot bytes over the process's wall time, in 10^6
// bytes per second), each agent's throughput relative to etcdctl's, and the agent's peak RSS,
// which streaming should keep the same at both sizes.
func BenchmarkBackup(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" || os.Getenv("VERSITYGW") == "" {
		b.Skip("ETCD_BIN and VERSITYGW are not set: run through `make bench`, which builds etcd and the S3 server")
	}
	etcdctl := filepath.Join(filepath.Dir(etcdtest.Binary(b)), "etcdctl")
	srv := s3test.Start(b)
	bucket := srv.Bucket(b, "backups")
	sizes := []int{64, 256}
	if os.Getenv("AGENT_BENCH_1GIB") != "" {
		sizes = append(sizes, 1024)
	}
	for _, sizeMiB := range sizes {
		server := etcdtest.StartCluster(b, 1)[0]
		fill(b, server, sizeMiB)
		b.Run(fmt.Sprintf("db=%dMiB", sizeMiB), func(b *testing.B) {
			dir := b.TempDir()
			snapshot := filepath.Join(dir, "etcdctl.db")
			backups := map[string]func() measurement{
				"etcdctl": func() measurement {
					m := run(b, exec.Command(etcdctl, "--endpoints", server.ClientURL, "snapshot", "save", snapshot))
					fi, err := os.Stat(snapshot)
					if err != nil {
						b.Fatal(err)
					}
					m.bytes = fi.Size()
					return m
				},
				"s3": func() measurement {
					return runAgent(b, backupProcessConfig{Endpoints: []string{server.ClientURL}, S3Endpoint: srv.Endpoint, Bucket: bucket})
				},
				"dir": func() measurement {
					return runAgent(b, backupProcessConfig{Endpoints: []string{server.ClientURL}, Dir: filepath.Join(dir, "agent")})
				},
			}
			order := []string{"etcdctl", "s3", "dir"}
			totals := map[string]*measurement{}
			for _, name := range order {
				totals[name] = &measurement{}
			}
			for i := 0; i < b.N; i++ {
				// Each run starts with no dirty pages left by the one before (or by the fill)
				// to write back, and the order turns so that none always goes first.
				for j := range order {
					name := order[(i+j)%len(order)]
					syscall.Sync()
					totals[name].add(backups[name]())
				}
			}
			b.ReportMetric(0, "ns/op")
			for _, name := range order {
				b.ReportMetric(totals[name].mbPerSecond(), name+"-MB/s")
			}
			b.ReportMetric(totals["s3"].mbPerSecond()/totals["etcdctl"].mbPerSecond(), "s3/etcdctl")
			b.ReportMetric(totals["dir"].mbPerSecond()/totals["etcdctl"].mbPerSecond(), "dir/etcdctl")
			for _, name := range []string{"s3", "dir"} {
				b.ReportMetric(float64(totals[name].peakRSS)/mib, name+"-peak-RSS-MiB")
			}
			b.ReportMetric(float64(totals["s3"].bytes)/float64(b.N)/mib, "snapshot-MiB")
		})
		server.Stop()
	}
}

// BenchmarkEncryptedBackup: the agent's backup with spec.encryption (age, X25519) beside the
// same backup in plain, to S3 and to a directory, each a process of its own, in turn and in
// rotating order in each iteration; then the restore's fetch of the last plain and encrypted
// snapshots from S3 into a staging directory (decrypting the encrypted one), in turn. A 256 MiB
// keyspace, and a 1 GiB one with AGENT_BENCH_1GIB=1 (not in `make bench`: the fill and the runs
// take minutes). Reports each one's throughput (snapshot bytes, as etcd sent them, over the
// wall time; 10^6 bytes per second), encrypted over plain, and the backup processes' peak RSS.
func BenchmarkEncryptedBackup(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" || os.Getenv("VERSITYGW") == "" {
		b.Skip("ETCD_BIN and VERSITYGW are not set: run through `make bench`, which builds etcd and the S3 server")
	}
	sizes := []int{256}
	if os.Getenv("AGENT_BENCH_1GIB") != "" {
		sizes = append(sizes, 1024)
	}
	identity, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	keys, err := encryption.Parse("bench", map[string][]byte{"bench": []byte(identity.String())})
	if err != nil {
		b.Fatal(err)
	}
	srv := s3test.Start(b)
	bucket := srv.Bucket(b, "backups")
	dest, err := storage.OpenS3(context.Background(), storage.S3{
		Bucket: bucket, Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true, AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer dest.Close()
	for _, sizeMiB := range sizes {
		server := etcdtest.StartCluster(b, 1)[0]
		fill(b, server, sizeMiB)
		b.Run(fmt.Sprintf("db=%dMiB", sizeMiB), func(b *testing.B) {
			dir := b.TempDir()
			s3 := backupProcessConfig{Endpoints: []string{server.ClientURL}, S3Endpoint: srv.Endpoint, Bucket: bucket}
			local := backupProcessConfig{Endpoints: []string{server.ClientURL}, Dir: filepath.Join(dir, "agent")}
			encrypted := func(cfg backupProcessConfig) backupProcessConfig {
				cfg.AgeKey = identity.String()
				return cfg
			}
			backups := map[string]backupProcessConfig{"s3": s3, "age-s3": encrypted(s3), "dir": local, "age-dir": encrypted(local)}
			order := []string{"s3", "age-s3", "dir", "age-dir"}
			totals := map[string]*measurement{"fetch": {}, "age-fetch": {}}
			for _, name := range order {
				totals[name] = &measurement{}
			}
			var plainBytes int64
			for i := 0; i < b.N; i++ {
				for j := range order {
					name := order[(i+j)%len(order)]
					syscall.Sync()
					m := runAgent(b, backups[name])
					if !strings.HasPrefix(name, "age-") {
						plainBytes = m.bytes
					}
					totals[name].add(m)
				}
				for _, name := range []string{"fetch", "age-fetch"} {
					syscall.Sync()
					totals[name].add(timeFetch(b, dest, totals[strings.TrimSuffix(name, "fetch")+"s3"].uri, keys))
				}
			}
			b.ReportMetric(0, "ns/op")
			for _, name := range append(order, "fetch", "age-fetch") {
				// Over the plaintext's bytes, so that the two are compared for the same work.
				b.ReportMetric(float64(plainBytes)*float64(b.N)/1e6/totals[name].elapsed.Seconds(), name+"-MB/s")
			}
			for _, pair := range [][2]string{{"age-s3", "s3"}, {"age-dir", "dir"}, {"age-fetch", "fetch"}} {
				b.ReportMetric(totals[pair[1]].elapsed.Seconds()/totals[pair[0]].elapsed.Seconds(), pair[0]+"/"+pair[1])
			}
			for _, name := range order {
				b.ReportMetric(float64(totals[name].peakRSS)/mib, name+"-peak-RSS-MiB")
			}
			b.ReportMetric(float64(plainBytes)/mib, "snapshot-MiB")
		})
		server.Stop()
	}
}

// timeFetch measures the restore's fetch of the snapshot at uri into a staging directory of its
// own, decrypting it when it is encrypted.
func timeFetch(b *testing.B, dest *storage.Destination, uri string, keys *encryption.Keyring) measurement {
	b.Helper()
	staging := filepath.Join(b.TempDir(), "restore")
	start := time.Now()
	res, err := agent.Fetch(context.Background(), agent.FetchConfig{Source: dest, Key: strings.TrimPrefix(uri, dest.URI("")), Dir: staging, Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	if err := os.RemoveAll(staging); err != nil {
		b.Fatal(err)
	}
	return measurement{elapsed: elapsed, bytes: res.SizeBytes, uri: uri}
}

// fill writes sizeMiB keys of fillValueSize random bytes, several at a time.
func fill(b *testing.B, server *etcdtest.Server, sizeMiB int) {
	b.Helper()
	c := server.Client(b)
	value := make([]byte, fillValueSize)
	_, _ = rand.Read(value)
	n := int64(sizeMiB * mib / fillValueSize)
	var next atomic.Int64
	errs := make(chan error, fillWorkers)
	var wg sync.WaitGroup
	for range fillWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				if _, err := c.Put(context.Background(), fmt.Sprintf("fill/%06d", i), string(value)); err != nil {
					errs <- fmt.Errorf("put fill/%06d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// measurement is what backup processes took: wall time, snapshot bytes, and (for the agent) the
// largest peak RSS of any of them.
type measurement struct {
	elapsed time.Duration
	bytes   int64
	peakRSS int64
	// uri of the last snapshot written.
	uri string
}

func (m *measurement) add(o measurement) {
	m.elapsed += o.elapsed
	m.bytes += o.bytes
	m.peakRSS = max(m.peakRSS, o.peakRSS)
	m.uri = o.uri
}

func (m *measurement) mbPerSecond() float64 { return float64(m.bytes) / 1e6 / m.elapsed.Seconds() }

// backupJobMemoryLimit is the memory limit of a backup Job's container (internal/resources),
// which the agent is told.
const backupJobMemoryLimit = 256 << 20

// runAgent runs one backup in the test binary re-executed as an agent, told the backup Job's
// memory limit.
func runAgent(b *testing.B, cfg backupProcessConfig) measurement {
	b.Helper()
	config, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), backupProcessEnv+"="+string(config), jobspec.MemoryLimitEnv+"="+strconv.Itoa(backupJobMemoryLimit))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	m := run(b, cmd)
	var res backupProcessResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		b.Fatalf("agent result %q: %v", stdout.String(), err)
	}
	m.bytes, m.peakRSS, m.uri = res.Backup.SizeBytes, res.PeakRSS, res.Backup.URI
	return m
}

// run runs cmd and measures its wall time.
func run(b *testing.B, cmd *exec.Cmd) measurement {
	b.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	return measurement{elapsed: time.Since(start)}
}
