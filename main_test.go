package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/controllers"
)

func TestWatchNamespacesFollowOLMTargetNamespaces(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		want       []string
	}{
		{"", nil}, // AllNamespaces, or no OLM
		{"team-a", []string{"team-a"}},
		{"team-a,team-b", []string{"team-a", "team-b"}},
		{" team-a , ,team-b ", []string{"team-a", "team-b"}},
	} {
		got := controllers.CacheOptions(splitNamespaces(tc.annotation)).DefaultNamespaces
		var names []string
		for ns := range got {
			names = append(names, ns)
		}
		if len(names) != len(tc.want) {
			t.Errorf("%q: watches %v, want %v", tc.annotation, names, tc.want)
			continue
		}
		if !reflect.DeepEqual(splitNamespaces(tc.annotation), tc.want) {
			t.Errorf("%q: split into %v, want %v", tc.annotation, splitNamespaces(tc.annotation), tc.want)
		}
	}
}

// Clusters that name no repository run RELATED_IMAGE_ETCD's: pinned by digest, it is used as it
// is for the default version (or the version its tag names), never stripped to its repository;
// every other version, and every version of a tagged image, is <repository>:v<version>.
func TestEtcdImagesComeFromTheRelatedImage(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	other := "3.7.3"
	for _, tc := range []struct{ relatedImage, defaultVersion, otherVersion string }{
		{"", defaultEtcdRepository + ":v" + etcdv1alpha1.DefaultEtcdVersion, defaultEtcdRepository + ":v" + other},
		{"127.0.0.1:5000/etcd:v3.6.16", "127.0.0.1:5000/etcd:v" + etcdv1alpha1.DefaultEtcdVersion, "127.0.0.1:5000/etcd:v" + other},
		{"registry:5000/mirror/etcd", "registry:5000/mirror/etcd:v" + etcdv1alpha1.DefaultEtcdVersion, "registry:5000/mirror/etcd:v" + other},
		{"quay.io/coreos/etcd" + digest, "quay.io/coreos/etcd" + digest, "quay.io/coreos/etcd:v" + other},
		{"127.0.0.1:5000/etcd" + digest, "127.0.0.1:5000/etcd" + digest, "127.0.0.1:5000/etcd:v" + other},
	} {
		images := etcdImages(tc.relatedImage, nil)
		if got := images.Image(etcdv1alpha1.DefaultEtcdVersion); got != tc.defaultVersion {
			t.Errorf("RELATED_IMAGE_ETCD=%q: the default version's image is %q, want %q", tc.relatedImage, got, tc.defaultVersion)
		}
		if got := images.Image(other); got != tc.otherVersion {
			t.Errorf("RELATED_IMAGE_ETCD=%q: %s's image is %q, want %q", tc.relatedImage, other, got, tc.otherVersion)
		}
	}
}

// RELATED_IMAGE_ETCD_V<version> gives one more version its own image, as given, pinned by digest
// or not; other variables, and versions given none, are left to RELATED_IMAGE_ETCD.
func TestEtcdImagesOfMoreVersionsComeFromTheirRelatedImages(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	images := etcdImages("ghcr.io/org/etcd"+digest, []string{
		"RELATED_IMAGE_ETCD_V3_7_3=ghcr.io/org/etcd" + digest[:len(digest)-1] + "0",
		"RELATED_IMAGE_ETCD=ignored:v1",
		"RELATED_IMAGE_OPERATOR=ghcr.io/org/etcd-operator:v1",
		"RELATED_IMAGE_ETCD_V3_6_15=",
		"PATH=/bin",
	})
	for version, want := range map[string]string{
		etcdv1alpha1.DefaultEtcdVersion: "ghcr.io/org/etcd" + digest,
		"3.7.3":                         "ghcr.io/org/etcd" + digest[:len(digest)-1] + "0",
		"3.6.15":                        "ghcr.io/org/etcd:v3.6.15",
	} {
		if got := images.Image(version); got != want {
			t.Errorf("%s's image is %q, want %q", version, got, want)
		}
	}
}

// LOG_LEVEL is how an OLM Subscription (config.env) turns the step-by-step logs on or off;
// --zap-log-level, where flags can be set, wins over it.
func TestLogLevelComesFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env   string
		args  []string
		debug bool
		info  bool
	}{
		{"", nil, false, true},
		{"debug", nil, true, true},
		{"DEBUG", nil, true, true},
		{"info", nil, false, true},
		{"error", nil, false, false},
		{"debug", []string{"--zap-log-level=error"}, false, false},
	} {
		t.Setenv(logLevelEnv, tc.env)
		opts, err := parseFlags(tc.args)
		if err != nil {
			t.Fatalf("LOG_LEVEL=%q %v: %v", tc.env, tc.args, err)
		}
		if debug, info := opts.zap.Level.Enabled(zapcore.DebugLevel), opts.zap.Level.Enabled(zapcore.InfoLevel); debug != tc.debug || info != tc.info {
			t.Errorf("LOG_LEVEL=%q %v: debug %v, info %v; want %v, %v", tc.env, tc.args, debug, info, tc.debug, tc.info)
		}
	}
	t.Setenv(logLevelEnv, "verbose")
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "debug, info or error") {
		t.Errorf("LOG_LEVEL=verbose: %v, want an error naming the accepted values", err)
	}
}

// The leader-election defaults replace a crashed leader no later than controller-runtime's
// would in the worst case — the lease, plus up to 2.2 retry periods (client-go's jitter) before
// the waiting replica sees the last renewal and as many after the lease ran out — with fewer
// Lease writes than its 2 s renewals, and keep client-go's rules: a renew deadline above 1.2
// retry periods and below the lease.
func TestLeaderElectionDefaultsBoundFailoverWithFewerWrites(t *testing.T) {
	opts, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	le := opts.leaderElection
	worst := func(lease, retry time.Duration) time.Duration { return lease + retry*44/10 }
	if got, theirs := worst(le.lease, le.retryPeriod), worst(15*time.Second, 2*time.Second); got > theirs {
		t.Errorf("a crashed leader may be replaced only after %v, later than controller-runtime's %v", got, theirs)
	}
	if le.retryPeriod <= 2*time.Second {
		t.Errorf("renewing every %v writes as often as controller-runtime's default", le.retryPeriod)
	}
	// An API server that answers no renewal for the renew deadline restarts the leader: 7 s
	// did, once, in CI on two cores at load 20. controller-runtime's 10 s is the floor.
	if le.renewDeadline < 10*time.Second {
		t.Errorf("renew deadline %v: a leader gives up sooner than controller-runtime's (10 s) when the API server is slow", le.renewDeadline)
	}
	if le.renewDeadline <= le.retryPeriod*12/10 || le.renewDeadline >= le.lease {
		t.Errorf("renew deadline %v outside (1.2 × %v, %v)", le.renewDeadline, le.retryPeriod, le.lease)
	}
	opts, err = parseFlags([]string{"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s"})
	if err != nil || opts.leaderElection != (leaderElectionTimes{15 * time.Second, 10 * time.Second, 2 * time.Second}) {
		t.Errorf("flags read as %+v (%v)", opts.leaderElection, err)
	}
}

// Go's profiling endpoints are off unless asked for: they are unauthenticated, and a heap
// profile holds whatever the process holds. PPROF_BIND_ADDRESS asks where flags cannot be set
// (an OLM Subscription's config.env); the flag wins.
func TestProfilingIsOffUnlessAskedFor(t *testing.T) {
	for _, tc := range []struct {
		env, want string
		args      []string
	}{
		{"", "", nil},
		{"127.0.0.1:6060", "127.0.0.1:6060", nil},
		{"127.0.0.1:6060", "0", []string{"--pprof-bind-address=0"}},
		{"", ":6061", []string{"--pprof-bind-address=:6061"}},
	} {
		t.Setenv(pprofBindAddressEnv, tc.env)
		opts, err := parseFlags(tc.args)
		if err != nil {
			t.Fatalf("%s=%q %v: %v", pprofBindAddressEnv, tc.env, tc.args, err)
		}
		if opts.pprofAddr != tc.want {
			t.Errorf("%s=%q %v: profiling at %q, want %q", pprofBindAddressEnv, tc.env, tc.args, opts.pprofAddr, tc.want)
		}
	}
}
