// Package storage writes, verifies, lists, reads and deletes snapshots in a backup destination —
// an S3-compatible bucket or a directory on a mounted PersistentVolumeClaim — through
// gocloud.dev/blob, so both behave alike and neither needs a hand-written client.
package storage

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// S3 says how to reach an S3-compatible bucket.
type S3 struct {
	Bucket         string
	Prefix         string
	Endpoint       string // empty: AWS
	Region         string
	ForcePathStyle bool
	AccessKeyID    string
	SecretKey      string
	SessionToken   string
	CAPEM          []byte // extra CA to trust, for a server with a private CA
}

// Destination is an open bucket with the key prefix snapshots live under.
type Destination struct {
	bucket *blob.Bucket
	prefix string
	// uriBase renders keys as URIs: s3://bucket/ or pvc://claim/subpath/.
	uriBase string
	// dir is the directory of a directory destination, whose uploads are synced to disk.
	dir string
	// client and bucketName are an S3 destination's, for what Store does beside the library.
	client     *s3.Client
	bucketName string
	// beforeCheck, when set (by tests), runs between Store's upload and its check: what a
	// store or a disk that loses data would do there.
	beforeCheck func(key string)
}

// OpenS3 opens an S3-compatible bucket.
func OpenS3(ctx context.Context, cfg S3) (*Destination, error) {
	// An unreachable server fails an attempt in seconds rather than the system's minutes;
	// the Job's own retries then take over.
	// The clone keeps the default transport's Proxy: behind a proxy, object storage is reached
	// through the HTTP(S)_PROXY that OLM gives the operator and the operator gives its Jobs.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = 2 * time.Minute
	if len(cfg.CAPEM) > 0 {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(cfg.CAPEM) {
			return nil, errors.New("the CA Secret's ca.crt holds no PEM certificate")
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	httpClient := &http.Client{Transport: transport}
	creds, err := credentialsFor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opts := s3.Options{
		Region:       cfg.Region,
		Credentials:  creds,
		UsePathStyle: cfg.ForcePathStyle,
		HTTPClient:   httpClient,
		// Retries are the reconciler's business: a backup attempt fails fast and says why.
		RetryMaxAttempts: 2,
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	client := s3.New(opts)
	bucket, err := s3blob.OpenBucket(ctx, client, cfg.Bucket, nil)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", cfg.Bucket, err)
	}
	return &Destination{bucket: bucket, prefix: cfg.Prefix, uriBase: BucketURI(cfg.Bucket), client: client, bucketName: cfg.Bucket}, nil
}

// credentialsFor is the keys cfg gives, or, with none, the ambient identity the AWS SDK's default
// chain finds: keys in the environment, a web identity token (EKS's IAM roles for service
// accounts, OpenShift's STS: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, exchanged at STS),
// a shared profile, or the node's instance role. The chain's calls to STS take the SDK's own
// transport, which honours the proxy variables and AWS_CA_BUNDLE.
func credentialsFor(ctx context.Context, cfg S3) (aws.CredentialsProvider, error) {
	if cfg.AccessKeyID != "" {
		return credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretKey, cfg.SessionToken), nil
	}
	ambient, err := config.LoadDefaultConfig(ctx, config.WithRegion(cfg.Region))
	if err != nil {
		return nil, fmt.Errorf("the pod's AWS identity: %w", err)
	}
	return ambient.Credentials, nil
}

// BucketURI names a bucket in URIs: s3://bucket/, to which object keys are appended.
func BucketURI(bucket string) string { return "s3://" + bucket + "/" }

// OpenDir opens a directory, such as a mounted PersistentVolumeClaim; uriBase names it in URIs
// (pvc://claim/subpath/).
func OpenDir(dir, uriBase string) (*Destination, error) {
	bucket, err := fileblob.OpenBucket(dir, &fileblob.Options{CreateDir: true, NoTempDir: true})
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", dir, err)
	}
	return &Destination{bucket: bucket, uriBase: uriBase, dir: dir}, nil
}

// Close releases the bucket.
func (d *Destination) Close() error { return d.bucket.Close() }

// Prefix is the key prefix snapshots are written under.
func (d *Destination) Prefix() string { return d.prefix }

// URI renders a key as the URI status records.
func (d *Destination) URI(key string) string { return d.uriBase + key }

// Artifact is an object as the destination holds it.
type Artifact struct {
	Key       string
	SizeBytes int64
	SHA256    string
	ModTime   time.Time
}

// Upload streams r to key. The object appears only when the upload completes: on any error —
// r failing, the server going away — the upload is aborted and nothing is left under key.
func (d *Destination) Upload(ctx context.Context, key string, r io.Reader) error {
	return d.UploadWithMetadata(ctx, key, r, nil)
}

// UploadWithMetadata is Upload, storing metadata with the object (S3 user metadata, a
// directory's attribute file next to it).
func (d *Destination) UploadWithMetadata(ctx context.Context, key string, r io.Reader, metadata map[string]string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := d.bucket.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", Metadata: metadata})
	if err != nil {
		return describe(fmt.Errorf("start upload of %s: %w", key, err))
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel() // cancelling before Close aborts the upload
		_ = w.Close()
		return describe(fmt.Errorf("upload %s: %w", key, err))
	}
	if err := w.Close(); err != nil {
		return describe(fmt.Errorf("complete upload of %s: %w", key, err))
	}
	return d.syncToDisk(key)
}

// syncToDisk makes a directory destination's new object durable: the library writes the
// object's attribute file (its metadata: a snapshot's keyspace record, which a verification
// holds it to) in place and renames its temporary file into place, neither synced, and a
// snapshot reported complete must survive the node losing power, with its record.
func (d *Destination) syncToDisk(key string) error {
	if d.dir == "" {
		return nil
	}
	for _, path := range pathsToSync(d.dir, key) {
		if err := syncPath(path); err != nil {
			return err
		}
	}
	return nil
}

// attributesFileSuffix names the file next to an object in which the library keeps its
// metadata (fileblob's ".attrs" sidecar).
const attributesFileSuffix = ".attrs"

// pathsToSync is what an upload of key into dir wrote: the object's file and its attribute
// file, then every directory from the file's up to dir, whose entries name them. A key with
// slashes is a file in subdirectories the library may just have made.
func pathsToSync(dir, key string) []string {
	file := filepath.Join(dir, filepath.FromSlash(key))
	paths := []string{file, file + attributesFileSuffix}
	for parent := filepath.Dir(file); ; parent = filepath.Dir(parent) {
		paths = append(paths, parent)
		if parent == filepath.Clean(dir) || parent == filepath.Dir(parent) {
			return paths
		}
	}
}

// Verify reads key back and returns its size and sha256, as the destination really holds it.
func (d *Destination) Verify(ctx context.Context, key string) (Artifact, error) {
	r, err := d.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return Artifact{}, describe(fmt.Errorf("read back %s: %w", key, err))
	}
	defer r.Close()
	hash := sha256.New()
	n, err := io.Copy(hash, r)
	if err != nil {
		return Artifact{}, describe(fmt.Errorf("read back %s: %w", key, err))
	}
	return Artifact{Key: key, SizeBytes: n, SHA256: hex.EncodeToString(hash.Sum(nil)), ModTime: r.ModTime()}, nil
}

// Metadata is the metadata key was stored with.
func (d *Destination) Metadata(ctx context.Context, key string) (map[string]string, error) {
	attrs, err := d.bucket.Attributes(ctx, key)
	if err != nil {
		return nil, describe(fmt.Errorf("read the attributes of %s: %w", key, err))
	}
	return attrs.Metadata, nil
}

// Open reads key.
func (d *Destination) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := d.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, describe(fmt.Errorf("open %s: %w", key, err))
	}
	return r, nil
}

// List lists the objects under prefix.
func (d *Destination) List(ctx context.Context, prefix string) ([]Artifact, error) {
	var out []Artifact
	it := d.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, describe(fmt.Errorf("list %s: %w", d.URI(prefix), err))
		}
		if !obj.IsDir {
			out = append(out, Artifact{Key: obj.Key, SizeBytes: obj.Size, ModTime: obj.ModTime})
		}
	}
}

// Delete deletes key; deleting what is already gone succeeds.
func (d *Destination) Delete(ctx context.Context, key string) error {
	if err := d.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return describe(fmt.Errorf("delete %s: %w", key, err))
	}
	return nil
}

// IsNotFound says whether err is for an object the destination does not hold.
func IsNotFound(err error) bool { return err != nil && gcerrors.Code(err) == gcerrors.NotFound }

// Permanent errors will not go away by retrying: the user must fix something.
type Permanent struct{ error }

func (p Permanent) Unwrap() error { return p.error }

// IsPermanent says whether err needs the user rather than a retry.
func IsPermanent(err error) bool {
	var p Permanent
	return errors.As(err, &p)
}

// describe marks the errors a retry cannot fix — wrong credentials, a missing bucket or
// object, a refused permission — as permanent, and keeps the rest transient.
func describe(err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied, gcerrors.NotFound, gcerrors.InvalidArgument, gcerrors.FailedPrecondition:
		return Permanent{err}
	}
	msg := err.Error()
	for _, permanent := range []string{"InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "AccessDenied"} {
		if strings.Contains(msg, permanent) {
			return Permanent{err}
		}
	}
	return err
}
