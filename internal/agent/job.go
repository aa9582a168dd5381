package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// Report is the termination message of an agent container: the result, or why it failed.
type Report struct {
	Backup    *BackupResult  `json:"backup,omitempty"`
	Restore   *RestoreResult `json:"restore,omitempty"`
	Preserved *PreservedData `json:"preserved,omitempty"`
	Log       *LogState      `json:"log,omitempty"`
	Verify    *VerifyResult  `json:"verify,omitempty"`
	// PointInTime is a point-in-time Job's plan (its fetch) or materialized snapshot (its
	// replay).
	PointInTime *PointInTimeResult `json:"pointInTime,omitempty"`
	Error       string             `json:"error,omitempty"`
	Permanent   bool               `json:"permanent,omitempty"`
	// Unrestorable: the snapshot is there but cannot be restored (it differs from its sha256,
	// or is no etcd snapshot).
	Unrestorable bool `json:"unrestorable,omitempty"`
	// Began and Ended bound a verify Job's fetch, on the node's clock and finer than the
	// second the pod's status keeps: the snapshot's recovery time begins with it.
	Began time.Time `json:"began,omitzero"`
	Ended time.Time `json:"ended,omitzero"`
}

// podPaths are where the Job's pod mounts what the agent reads and writes; the tests point
// them into directories of their own, to run a Job's entry point whole.
var podPaths = struct{ claim, verifyScratch, terminationMessage, memberMount, agentBinary, encryptionKeys string }{
	claim: jobspec.ClaimDir, verifyScratch: jobspec.VerifyScratchDir, terminationMessage: jobspec.TerminationMessagePath,
	memberMount: jobspec.MemberDataMount, agentBinary: jobspec.AgentBinary, encryptionKeys: jobspec.EncryptionKeysDir,
}

// maxReportBytes is what the kubelet keeps of a termination message.
const maxReportBytes = 4096

// Encode renders the report to fit a termination message: long error messages are cut and
// the oldest of the pruned snapshots are counted rather than listed, never the result itself.
// The newest are listed: those the EtcdBackup's status may still name.
func (r Report) Encode() []byte {
	if len(r.Error) > 2048 {
		r.Error = r.Error[:2048] + "…"
	}
	b, _ := json.Marshal(r)
	if len(b) <= maxReportBytes || r.Backup == nil {
		return b
	}
	full := *r.Backup
	listed := func(n int) []byte {
		trimmed := full
		trimmed.Pruned, trimmed.PrunedCount = full.Pruned[:n], full.PrunedCount+len(full.Pruned)-n
		r.Backup = &trimmed
		b, _ := json.Marshal(r)
		return b
	}
	n := sort.Search(len(full.Pruned)+1, func(n int) bool { return len(listed(n)) > maxReportBytes }) - 1
	return listed(max(n, 0))
}

// DecodeReport parses a termination message.
func DecodeReport(message string) (Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(message), &r); err != nil {
		return Report{}, fmt.Errorf("agent report %q: %w", message, err)
	}
	return r, nil
}

// RunBackupJob is `manager agent backup`: it reads the Job's configuration, takes the backup
// and writes the report. The returned code is the process's exit code.
func RunBackupJob(ctx context.Context) int {
	report := Report{}
	result, err := backupFromEnvironment(ctx)
	if err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	} else {
		report.Backup = &result
	}
	return finish(report)
}

// RunRestoreFetch is `manager agent restore-fetch`: download and check the snapshot into the
// member's staging directory.
func RunRestoreFetch(ctx context.Context) int {
	report := Report{}
	result, err := fetchFromEnvironment(ctx, jobspec.RestoreStagingDir)
	if err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	} else {
		report.Restore = &result
	}
	return finish(report)
}

// RunVerifyFetch is `manager agent verify-fetch`: download and check the snapshot into the
// verify Job's scratch directory.
func RunVerifyFetch(ctx context.Context) int {
	report := Report{Began: time.Now()}
	result, err := verifyFetchFromEnvironment(ctx)
	report.Ended = time.Now()
	if err != nil {
		report.Error, report.Permanent, report.Unrestorable = err.Error(), isPermanent(err), IsUnrestorable(err)
	} else {
		report.Restore = &result
	}
	return finish(report)
}

// verifyReady bounds the wait for the restored member, which replays nothing but may open a
// large database.
const verifyReady = 5 * time.Minute

// RunVerify is `manager agent verify`: compare the member serving the restored snapshot with
// what its backup recorded. A snapshot that does not match fails the Job permanently.
func RunVerify(ctx context.Context) int {
	report := Report{}
	cfg, err := readJobConfig()
	var clientTLS *tls.Config
	if err == nil {
		clientTLS, err = VerifyClientTLS(verifyTLSDir())
	}
	var result VerifyResult
	if err == nil {
		result, err = VerifyRestored(ctx, VerifyConfig{
			Etcd: etcd.Config{Endpoints: cfg.Endpoints, TLS: clientTLS}, Revision: cfg.Revision, Keyspace: cfg.Keyspace, Ready: verifyReady,
		})
	}
	switch {
	case err != nil:
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	case result.Mismatch != "":
		report.Verify, report.Error, report.Permanent, report.Unrestorable = &result, result.Mismatch, true, true
	default:
		report.Verify = &result
	}
	return finish(report)
}

func verifyFetchFromEnvironment(ctx context.Context) (RestoreResult, error) {
	cfg, err := readJobConfig()
	if err != nil {
		return RestoreResult{}, err
	}
	source, err := openStorage(ctx, cfg.Storage)
	if err != nil {
		return RestoreResult{}, err
	}
	defer source.Close()
	keys, err := encryptionKeys(cfg)
	if err != nil {
		return RestoreResult{}, err
	}
	result, err := Fetch(ctx, FetchConfig{Source: source, Key: cfg.Key, SHA256: cfg.SHA256, Dir: podPaths.verifyScratch, KeepDir: true, Keys: keys})
	if err != nil {
		return result, err
	}
	// The restored member starts next, on the material made here (jobspec.VerifyEtcdTLSArgs).
	return result, WriteVerifyTLS(verifyTLSDir(), time.Now())
}

// verifyTLSDir is where the verify pod's TLS material is, in its scratch directory.
func verifyTLSDir() string { return filepath.Join(podPaths.verifyScratch, jobspec.VerifyTLSSubdir) }

// RunRestoreInstall is `manager agent restore-install`: move the restored data into place.
func RunRestoreInstall() int {
	report := Report{}
	if err := Install(jobspec.StagedDataDir, jobspec.MemberDataDir, jobspec.RestoreStagingDir); err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	}
	return finish(report)
}

// RunPreserveData is `manager agent preserve-data`: copy the member's data directory, its claim
// mounted read-only where the member's pod mounts it, into the recovery claim.
func RunPreserveData() int {
	report := Report{}
	result, err := preserveFromEnvironment()
	if err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	} else {
		report.Preserved = &result
	}
	return finish(report)
}

// RunReadLog is `manager agent read-log`: how far the member's raft log reaches, read from the
// WAL on its claim (mounted read-only, where its pod mounts it).
func RunReadLog() int {
	report := Report{}
	cfg, err := readJobConfig()
	if err == nil && cfg.Member == "" {
		err = permanentError{fmt.Errorf("%s names no member whose log to read", jobspec.ConfigEnv)}
	}
	var result LogState
	if err == nil {
		result, err = ReadLog(cfg.Member, jobspec.MemberDataDir)
	}
	if err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	} else {
		report.Log = &result
	}
	return finish(report)
}

func preserveFromEnvironment() (PreservedData, error) {
	cfg, err := readJobConfig()
	if err != nil {
		return PreservedData{}, err
	}
	if cfg.Member == "" {
		return PreservedData{}, permanentError{fmt.Errorf("%s names no member whose data to preserve", jobspec.ConfigEnv)}
	}
	if cfg.Recovery == "" {
		return PreserveData(cfg.Member, jobspec.MemberDataDir, podPaths.claim, time.Now)
	}
	// Each recovery copies into a directory of its own: a member that survives a second loss
	// is copied again, not answered with the first copy.
	if cfg.Recovery != filepath.Base(cfg.Recovery) || cfg.Recovery == "." || cfg.Recovery == ".." {
		return PreservedData{}, permanentError{fmt.Errorf("recovery %q cannot name a directory", cfg.Recovery)}
	}
	root := filepath.Join(podPaths.claim, cfg.Recovery)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return PreservedData{}, err
	}
	result, err := PreserveData(cfg.Member, jobspec.MemberDataDir, root, time.Now)
	result.Path = path.Join(cfg.Recovery, result.Path)
	return result, err
}

func fetchFromEnvironment(ctx context.Context, dir string) (RestoreResult, error) {
	cfg, err := readJobConfig()
	if err != nil {
		return RestoreResult{}, err
	}
	source, err := openStorage(ctx, cfg.Storage)
	if err != nil {
		return RestoreResult{}, err
	}
	defer source.Close()
	keys, err := encryptionKeys(cfg)
	if err != nil {
		return RestoreResult{}, err
	}
	result, err := Fetch(ctx, FetchConfig{Source: source, Key: cfg.Key, SHA256: cfg.SHA256, Fallbacks: cfg.Fallbacks, Dir: dir, Keys: keys})
	if err != nil {
		return result, err
	}
	return result, BumpPassesWatermark(ctx, source, WatermarkDirOf(cfg.Key, cfg.WatermarkDir), result.Revision, cfg.RevisionBump)
}

func finish(report Report) int {
	msg := report.Encode()
	fmt.Fprintln(os.Stderr, string(msg))
	if err := os.WriteFile(podPaths.terminationMessage, msg, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "write %s: %v\n", podPaths.terminationMessage, err)
	}
	switch {
	case report.Error == "":
		return 0
	case report.Permanent:
		return jobspec.ExitPermanent
	default:
		return 1
	}
}

func backupFromEnvironment(ctx context.Context) (BackupResult, error) {
	cfg, err := readJobConfig()
	if err != nil {
		return BackupResult{}, err
	}
	etcdCfg, err := etcdConfig(cfg)
	if err != nil {
		return BackupResult{}, err
	}
	keys, err := encryptionKeys(cfg)
	if err != nil {
		return BackupResult{}, err
	}
	dest, err := openStorage(ctx, cfg.Storage)
	if err != nil {
		return BackupResult{}, err
	}
	defer dest.Close()
	return Backup(ctx, BackupConfig{
		Etcd:        etcdCfg,
		Series:      backupplan.Series{Namespace: cfg.Namespace, Cluster: cfg.Cluster, Backup: cfg.Backup, UID: cfg.BackupUID},
		Destination: dest,
		MaxCount:    cfg.MaxCount, MaxAge: cfg.MaxAge, LastBackup: cfg.LastBackup, Keys: keys, Now: time.Now,
		SkipMembers: cfg.SkipMembers,
	})
}

// encryptionKeys are the keys of the Secret the Job mounts, when its configuration names one.
// A Secret without a usable key fails the Job for good: the operator checks it before making
// the Job, so it was changed since.
func encryptionKeys(cfg jobspec.JobConfig) (*encryption.Keyring, error) {
	if cfg.Encryption == nil {
		return nil, nil
	}
	keys, err := encryption.ReadDir(cfg.Encryption.SecretName, podPaths.encryptionKeys)
	if err != nil {
		return nil, permanentError{err}
	}
	return keys, nil
}

// permanentError is a failure retrying cannot help: a mistake in what the Job was given, a
// snapshot that does not match its record.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func isPermanent(err error) bool {
	var pe permanentError
	return errors.As(err, &pe) || storage.IsPermanent(err)
}

func readJobConfig() (jobspec.JobConfig, error) {
	var cfg jobspec.JobConfig
	raw := os.Getenv(jobspec.ConfigEnv)
	if raw == "" {
		return cfg, permanentError{fmt.Errorf("%s is not set: the agent runs in Jobs the operator makes", jobspec.ConfigEnv)}
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return cfg, permanentError{fmt.Errorf("%s: %w", jobspec.ConfigEnv, err)}
	}
	return cfg, nil
}

func etcdConfig(cfg jobspec.JobConfig) (etcd.Config, error) {
	out := etcd.Config{Endpoints: cfg.Endpoints}
	if cfg.TLS {
		var err error
		out.TLS, err = loadClientTLS(jobspec.EtcdTLSDir, certs.KeyCert, certs.KeyKey, certs.KeyCA)
		if err != nil {
			return out, err
		}
	}
	if cfg.Auth && !cfg.TLS {
		out.Username, out.Password = "root", os.Getenv(jobspec.EtcdPasswordEnv)
	}
	return out, nil
}

// loadClientTLS is a client's TLS configuration from the files in dir: its certificate and
// key, and the CA its server's certificate is checked against, the only one trusted.
func loadClientTLS(dir, certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		return nil, permanentError{fmt.Errorf("the client certificate in %s: %w", dir, err)}
	}
	roots, err := readCA(filepath.Join(dir, caFile))
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

func readCA(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, permanentError{err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, permanentError{fmt.Errorf("%s holds no PEM certificate", file)}
	}
	return pool, nil
}

// openStorage opens the destination as mounted or configured in the Job.
func openStorage(ctx context.Context, loc etcdv1alpha1.StorageLocation) (*storage.Destination, error) {
	if loc.PVC != nil {
		dir := filepath.Join(podPaths.claim, filepath.FromSlash(loc.PVC.SubPath))
		return storage.OpenDir(dir, ClaimURIBase(loc.PVC))
	}
	s3 := loc.S3
	cfg := storage.S3{
		Bucket: s3.Bucket, Prefix: s3.Prefix, Endpoint: s3.Endpoint, Region: s3.Region, ForcePathStyle: s3.ForcePathStyle,
		AccessKeyID: os.Getenv(jobspec.AccessKeyIDEnv), SecretKey: os.Getenv(jobspec.SecretAccessKeyEnv), SessionToken: os.Getenv(jobspec.SessionTokenEnv),
	}
	// Without a credentials Secret the keys are left empty, and storage takes the pod's
	// ambient AWS identity.
	if s3.CredentialsSecretName != "" && (cfg.AccessKeyID == "" || cfg.SecretKey == "") {
		return nil, permanentError{fmt.Errorf("Secret %s needs the keys %s and %s", s3.CredentialsSecretName, jobspec.AccessKeyIDEnv, jobspec.SecretAccessKeyEnv)}
	}
	if s3.CASecretName != "" {
		pem, err := os.ReadFile(filepath.Join(jobspec.StorageCADir, jobspec.StorageCAKey))
		if err != nil {
			return nil, permanentError{fmt.Errorf("Secret %s needs the key %s: %w", s3.CASecretName, jobspec.StorageCAKey, err)}
		}
		cfg.CAPEM = pem
	}
	return storage.OpenS3(ctx, cfg)
}

// LocationURIBase is how the URIs of snapshots at a storage location begin, the S3 prefix
// included: s3://bucket/prefix or pvc://claim/subpath/.
func LocationURIBase(loc etcdv1alpha1.StorageLocation) string {
	if loc.PVC != nil {
		return ClaimURIBase(loc.PVC)
	}
	return storage.BucketURI(loc.S3.Bucket) + loc.S3.Prefix
}

// ClaimURIBase names a claim's directory in URIs: pvc://claim/subpath/.
func ClaimURIBase(pvc *etcdv1alpha1.PVCLocation) string {
	sub := strings.Trim(path.Clean("/"+pvc.SubPath), "/")
	if sub == "" {
		return "pvc://" + pvc.ClaimName + "/"
	}
	return "pvc://" + pvc.ClaimName + "/" + sub + "/"
}
