package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The S3 upload's parts: partSize bytes each, at most partBuffers of them in memory, of which
// uploadConcurrency are on the wire while the next fills. The agent's memory is bounded by
// their product, whatever the snapshot's size; 10 000 parts (S3's limit) of 8 MiB are 78 GiB,
// far beyond etcd's largest database.
const (
	partSize          = 8 << 20
	uploadConcurrency = 2
	partBuffers       = uploadConcurrency + 1
)

// uploadParts streams what write writes into key as an S3 multipart upload (one PutObject
// when it fits in a part), each part sent with its sha256 as x-amz-checksum-sha256, which the
// store verifies on receipt, and hashed by nothing else on this side (checksumOptions). A store that refuses the checksums gets the parts without them (and Store
// then reads the object back). On any failure the upload is aborted: nothing is left.
func (d *Destination) uploadParts(ctx context.Context, key string, metadata map[string]string, write func(io.Writer) error) (streamed, error) {
	if err := plainKey(key); err != nil {
		return streamed{}, err
	}
	// The requests run under the caller's ctx, not the stream's: a failed stream lets the parts
	// on the wire finish before the upload is aborted, since a part that lands after the
	// abort would be kept.
	requests := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newPartWriter(ctx, partSize, partBuffers)
	u := &partUpload{client: d.client, bucket: d.bucketName, key: key, metadata: s3Metadata(metadata), checksums: true, cancel: cancel}
	uploaded := make(chan error, 1)
	go func() { uploaded <- u.run(ctx, requests, w.full, w.free) }()

	writeErr := write(w)
	if writeErr == nil {
		writeErr = w.finish()
	}
	if writeErr != nil {
		cancel(writeErr) // the upload is aborted, not completed
	}
	close(w.full)
	uploadErr := <-uploaded
	// The first failure, the writer's or the upload's: the other only saw it as its
	// cancellation.
	if cause := context.Cause(ctx); cause != nil {
		return streamed{}, describe(fmt.Errorf("upload %s: %w", key, cause))
	}
	if uploadErr != nil {
		return streamed{}, describe(fmt.Errorf("upload %s: %w", key, uploadErr))
	}
	sent := streamed{size: w.n, sha256: w.whole.Sum(nil), unchecked: u.unchecked}
	if u.checksums {
		sent.storeChecksums = u.storeChecksums(sent.sha256)
	}
	return sent, nil
}

// partWriter cuts what is written into parts of size bytes, hashing it whole on the way, and
// hands each full part to whoever stores it, on another goroutine; it blocks while all its
// buffers (count at most) are full or being stored.
type partWriter struct {
	ctx   context.Context
	size  int
	count int
	full  chan []byte
	free  chan []byte
	made  int
	buf   []byte
	whole hash.Hash
	n     int64
}

func newPartWriter(ctx context.Context, size, count int) *partWriter {
	return &partWriter{ctx: ctx, size: size, count: count, full: make(chan []byte, count), free: make(chan []byte, count), whole: sha256.New()}
}

func (w *partWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if w.buf == nil {
			buf, err := w.take()
			if err != nil {
				return written, err
			}
			w.buf = buf[:0]
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.whole.Write(p[:k])
		w.buf = w.buf[:len(w.buf)+k]
		w.n += int64(k)
		written += k
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.send(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// take is a buffer to fill: a free one, a new one while fewer than count exist, or the next
// one freed.
func (w *partWriter) take() ([]byte, error) {
	select {
	case buf := <-w.free:
		return buf, nil
	default:
	}
	if w.made < w.count {
		w.made++
		return make([]byte, w.size), nil
	}
	select {
	case buf := <-w.free:
		return buf, nil
	case <-w.ctx.Done():
		return nil, context.Cause(w.ctx)
	}
}

func (w *partWriter) send() error {
	select {
	case w.full <- w.buf:
		w.buf = nil
		return nil
	case <-w.ctx.Done():
		return context.Cause(w.ctx)
	}
}

// finish hands the last, partial part to the upload; an empty stream is one empty part.
func (w *partWriter) finish() error {
	if w.buf == nil && w.n > 0 {
		return nil
	}
	if w.buf == nil {
		w.buf = []byte{}
	}
	return w.send()
}

// partUpload is one object's upload, part by part as they fill.
type partUpload struct {
	client   *s3.Client
	bucket   string
	key      string
	metadata map[string]string
	cancel   context.CancelCauseFunc
	// checksums is whether the parts carry their sha256; unchecked says why not.
	checksums bool
	unchecked string

	mu       sync.Mutex
	err      error
	parts    []types.CompletedPart
	partSums [][]byte
}

// run uploads the parts arriving on full, returning each buffer to free once sent, and
// completes the upload when full is closed, unless stream was cancelled (the writer failed):
// then, as on its own failure, it aborts the upload once no part is on the wire.
func (u *partUpload) run(stream, requests context.Context, full <-chan []byte, free chan<- []byte) (err error) {
	defer func() {
		if err != nil {
			u.cancel(err) // the writer stops, rather than stream the rest to no one
		}
		for buf := range full { // unblocks a writer still sending
			free <- buf
		}
	}()
	first, ok := <-full
	if !ok {
		return context.Cause(stream)
	}
	if len(first) < partSize {
		return u.putObject(requests, first)
	}
	uploadID, err := u.start(requests, first)
	if err != nil {
		return err
	}
	// From here on the parts go as they fill, several at a time.
	free <- first
	var wg sync.WaitGroup
	slots := make(chan struct{}, uploadConcurrency)
	number := int32(1)
	for buf := range full {
		number++
		if u.failed() != nil || stream.Err() != nil {
			free <- buf
			continue
		}
		slots <- struct{}{}
		part := number
		wg.Go(func() {
			defer func() { <-slots }()
			defer func() { free <- buf }()
			if err := u.uploadPart(requests, uploadID, part, buf); err != nil {
				u.fail(err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(u.failed(), context.Cause(stream)); err != nil {
		u.abort(requests, uploadID)
		return u.failed() // the writer's own error, if it is the cause, is Store's to report
	}
	return u.complete(requests, uploadID)
}

// start creates the multipart upload and uploads its first part, before any other: a store
// that refuses the checksums refuses them there, and the upload starts again without them
// while the first part is still in hand.
func (u *partUpload) start(ctx context.Context, first []byte) (string, error) {
	for {
		uploadID, err := u.create(ctx)
		if err == nil {
			err = u.uploadPart(ctx, uploadID, 1, first)
			if err != nil {
				u.abort(ctx, uploadID)
			}
		}
		if err == nil {
			return uploadID, nil
		}
		if !u.checksums || !refusedChecksums(err) {
			return "", err
		}
		u.withoutChecksums(err)
	}
}

func (u *partUpload) create(ctx context.Context) (string, error) {
	in := &s3.CreateMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), Metadata: u.metadata,
		ContentType: aws.String(objectContentType),
	}
	if u.checksums {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmSha256
	}
	out, err := u.client.CreateMultipartUpload(ctx, in, u.checksumOptions(nil))
	if err != nil {
		return "", fmt.Errorf("start the multipart upload: %w", err)
	}
	u.parts, u.partSums = nil, nil
	return aws.ToString(out.UploadId), nil
}

func (u *partUpload) uploadPart(ctx context.Context, uploadID string, number int32, buf []byte) error {
	in := &s3.UploadPartInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(uploadID),
		PartNumber: aws.Int32(number), Body: bytes.NewReader(buf), ContentLength: aws.Int64(int64(len(buf))),
	}
	sum, header := u.checksumOf(buf)
	in.ChecksumSHA256 = header
	out, err := u.client.UploadPart(ctx, in, u.checksumOptions(sum))
	if err != nil {
		return fmt.Errorf("part %d: %w", number, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.parts = append(u.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(number), ChecksumSHA256: in.ChecksumSHA256})
	if sum != nil {
		u.partSums = append(u.partSums, append([]byte{byte(number >> 24), byte(number >> 16), byte(number >> 8), byte(number)}, sum...))
	}
	return nil
}

func (u *partUpload) complete(ctx context.Context, uploadID string) error {
	slices.SortFunc(u.parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	_, err := u.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
	}, u.checksumOptions(nil))
	if err != nil {
		u.abort(ctx, uploadID)
		return fmt.Errorf("complete the multipart upload: %w", err)
	}
	return nil
}

// abort gives the parts up: the store keeps none of them. It outlives a cancelled ctx.
func (u *partUpload) abort(ctx context.Context, uploadID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = u.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: aws.String(uploadID),
	})
}

// checksumOf is buf's sha256 and its x-amz-checksum-sha256 header value, or nothing once the
// store has refused checksums.
func (u *partUpload) checksumOf(buf []byte) ([]byte, *string) {
	if !u.checksums {
		return nil, nil
	}
	sum := sha256.Sum256(buf)
	return sum[:], aws.String(base64.StdEncoding.EncodeToString(sum[:]))
}

// putObject uploads an object that fits in one part, with its checksum, or without it if the
// store refuses it.
func (u *partUpload) putObject(ctx context.Context, buf []byte) error {
	for {
		in := &s3.PutObjectInput{
			Bucket: aws.String(u.bucket), Key: aws.String(u.key), Metadata: u.metadata,
			ContentType: aws.String(objectContentType), Body: bytes.NewReader(buf), ContentLength: aws.Int64(int64(len(buf))),
		}
		sum, header := u.checksumOf(buf)
		in.ChecksumSHA256 = header
		_, err := u.client.PutObject(ctx, in, u.checksumOptions(sum))
		if err == nil {
			return nil
		}
		if !u.checksums || !refusedChecksums(err) {
			return err
		}
		u.withoutChecksums(err)
	}
}

func (u *partUpload) withoutChecksums(refusal error) {
	u.checksums = false
	u.unchecked = "the store refused sha256 checksums: " + refusal.Error()
}

// checksumOptions sends a request whose body's sha256 is sum (nil: no body) with that sha256
// in x-amz-checksum-sha256, which the store checks the body against, and spares the SDK a
// second hash of the body for the signature: over TLS the payload goes unsigned, as the SDK
// sends it there by default (the signature covers the checksum header, TLS the body); over
// plain HTTP it is signed with sum. Without checksums, it keeps the SDK from adding its own (a
// CRC32 by default), which a store that refused ours would refuse too.
func (u *partUpload) checksumOptions(sum []byte) func(*s3.Options) {
	return func(o *s3.Options) {
		if !u.checksums {
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			return
		}
		if sum == nil {
			return
		}
		signed := hex.EncodeToString(sum)
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("PayloadHashFromItsChecksum",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					payloadHash := signed
					if req, ok := in.Request.(*smithyhttp.Request); ok && req.IsHTTPS() {
						payloadHash = unsignedPayload
					}
					return next.HandleFinalize(v4.SetPayloadHash(ctx, payloadHash), in)
				}), middleware.Before)
		})
	}
}

// unsignedPayload is SigV4's x-amz-content-sha256 for a body the signature does not cover.
const unsignedPayload = "UNSIGNED-PAYLOAD"

func (u *partUpload) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = err
		u.cancel(err)
	}
}

func (u *partUpload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// storeChecksums are the checksums the store may report for the object: for a multipart
// upload, S3's composite one (the sha256 of the parts' sha256s, in part order, with the part
// count); and the sha256 of the whole, which a single PutObject's checksum is, and which a
// store that computes whole-object checksums would report.
func (u *partUpload) storeChecksums(whole []byte) []string {
	checksums := []string{base64.StdEncoding.EncodeToString(whole)}
	if len(u.parts) == 0 {
		return checksums
	}
	slices.SortFunc(u.partSums, func(a, b []byte) int { return bytes.Compare(a[:4], b[:4]) })
	composite := sha256.New()
	for _, numbered := range u.partSums {
		composite.Write(numbered[4:])
	}
	return append(checksums, base64.StdEncoding.EncodeToString(composite.Sum(nil))+"-"+strconv.Itoa(len(u.partSums)))
}

// objectContentType is what every snapshot is stored as.
const objectContentType = "application/octet-stream"

// s3Metadata escapes metadata as the gocloud driver does, so that Metadata reads it back.
func s3Metadata(metadata map[string]string) map[string]string {
	if len(metadata) == 0 {
		return nil
	}
	escaped := make(map[string]string, len(metadata))
	for k, v := range metadata {
		escaped[url.PathEscape(k)] = url.PathEscape(v)
	}
	return escaped
}

// refusedChecksums says whether err may be a store's refusal of the checksum headers rather
// than of the request: a 400 or a 501, other than the answers of a store that checked the
// checksum and found it wrong, which is the data's fault and must fail the upload. Taking too
// many errors for a refusal costs one more request, which fails again with the same error
// when the checksums were not the cause; taking too few would fail every backup to a store
// that does not know them.
func refusedChecksums(err error) bool {
	var response *smithyhttp.ResponseError
	if !errors.As(err, &response) {
		return false
	}
	if status := response.HTTPStatusCode(); status != http.StatusBadRequest && status != http.StatusNotImplemented {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "BadDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch", "InvalidDigest":
			return false
		}
	}
	return true
}

// headChecksum is key's size and sha256 checksum as the store reports them; an empty
// checksum when it reports none.
func (d *Destination) headChecksum(ctx context.Context, key string) (int64, string, error) {
	out, err := d.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(d.bucketName), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return 0, "", describe(fmt.Errorf("ask the store for the checksum of %s: %w", key, err))
	}
	return aws.ToInt64(out.ContentLength), aws.ToString(out.ChecksumSHA256), nil
}
