package storage_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// roundTrip writes an object and reads it back: the credentials were taken.
func roundTrip(t *testing.T, srv *s3test.Server, cfg storage.S3) {
	t.Helper()
	cfg.Bucket, cfg.Prefix, cfg.Endpoint, cfg.Region, cfg.ForcePathStyle = srv.Bucket(t, "backups"), "etcd/", srv.Endpoint, "us-east-1", true
	d, err := storage.OpenS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	key := "etcd/main-20260301T120000Z-r42.db"
	if err := d.Upload(t.Context(), key, bytes.NewReader([]byte("a snapshot"))); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Verify(t.Context(), key); err != nil {
		t.Fatal(err)
	}
}

// clearAmbientAWS takes out of the test's environment what the AWS SDK would find of this
// machine's own identity, so that a test's credentials are the only ones.
func clearAmbientAWS(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_ROLE_SESSION_NAME": "", "AWS_ENDPOINT_URL_STS": "",
		"AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
}

// With no credentials Secret the agent takes the pod's ambient identity, the AWS SDK's default
// chain: here, keys in the environment.
func TestAmbientIdentityFromTheEnvironment(t *testing.T) {
	clearAmbientAWS(t)
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	roundTrip(t, srv, storage.S3{})
}

// On EKS (IAM roles for service accounts) and on OpenShift with STS, the pod of a
// ServiceAccount bound to a role gets AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, a projected
// service-account token; the SDK trades that token at STS (AssumeRoleWithWebIdentity) for
// temporary keys. Here STS is a test server at AWS_ENDPOINT_URL_STS that checks the role and
// the token and answers with the S3 server's keys in the documented response. It leaves out the
// session token AWS's STS adds: the S3 server here has no STS and refuses any session token.
func TestAmbientIdentityFromAWebIdentityToken(t *testing.T) {
	clearAmbientAWS(t)
	srv := s3test.Start(t)
	const role, token = "arn:aws:iam::123456789012:role/etcd-backups", "a-projected-service-account-token"
	var exchanged atomic.Int32
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.Form.Get("Action") != "AssumeRoleWithWebIdentity" || r.Form.Get("RoleArn") != role || r.Form.Get("WebIdentityToken") != token {
			http.Error(w, fmt.Sprintf("unexpected STS call %v", r.Form), http.StatusBadRequest)
			return
		}
		exchanged.Add(1)
		w.Header().Set("Content-Type", "text/xml")
		_, _ = fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>%s</AccessKeyId>
      <SecretAccessKey>%s</SecretAccessKey>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
    <AssumedRoleUser><Arn>%s/etcd-operator</Arn><AssumedRoleId>AROA:etcd-operator</AssumedRoleId></AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>`, s3test.AccessKey, s3test.SecretKey, role)
	}))
	t.Cleanup(sts.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ROLE_ARN", role)
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	t.Setenv("AWS_ENDPOINT_URL_STS", sts.URL)
	roundTrip(t, srv, storage.S3{})
	if exchanged.Load() == 0 {
		t.Error("the web identity token was never exchanged at STS")
	}
}
