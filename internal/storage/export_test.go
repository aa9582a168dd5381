package storage

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// PathsToSync is what an upload into a directory syncs.
var PathsToSync = pathsToSync

// BeforeCheck runs f between Store's upload and its check.
func BeforeCheck(d *Destination, f func(key string)) { d.beforeCheck = f }

// FilePath is key's file in a directory destination.
func FilePath(d *Destination, key string) string {
	return filepath.Join(d.dir, filepath.FromSlash(key))
}

// PendingUploads are what an upload may leave unfinished: a bucket's multipart uploads, a
// directory's temporary files.
func PendingUploads(t *testing.T, d *Destination) []string {
	t.Helper()
	var pending []string
	if d.dir != "" {
		err := filepath.WalkDir(d.dir, func(path string, _ fs.DirEntry, err error) error {
			if strings.HasSuffix(path, ".tmp") {
				pending = append(pending, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return pending
	}
	out, err := d.client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(d.bucketName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		pending = append(pending, aws.ToString(u.Key)+" "+aws.ToString(u.UploadId))
	}
	return pending
}
