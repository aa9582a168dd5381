// Command manager runs the etcd-operator controllers.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/operator-framework/operator-lib/proxy"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/controllers"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/platform"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// watchNamespacesEnv is set by config/manager from the pod's olm.targetNamespaces annotation,
// so an OwnNamespace or SingleNamespace install under OLM watches only what it was given.
const watchNamespacesEnv = "WATCH_NAMESPACES"

// relatedImageEtcdEnv names the etcd image the operator was installed with (the CSV's
// relatedImages, so that mirrors for disconnected installs cover it). Clusters that set no
// spec.repository run <its repository>:v<spec.version>; pinned by digest, it is run as it is for
// its own version (etcdImages).
const relatedImageEtcdEnv = "RELATED_IMAGE_ETCD"

// relatedImageEtcdVersionPrefix names the image of one more etcd version the operator ships
// (RELATED_IMAGE_ETCD_V3_7_3: 3.7.3's), also in the CSV's relatedImages: a disconnected cluster's
// mirror then holds every version a cluster may be upgraded to, and a release pins each by digest.
const relatedImageEtcdVersionPrefix = "RELATED_IMAGE_ETCD_V"

// relatedImageOperatorEnv is the operator's own image, which its agent Jobs run.
const relatedImageOperatorEnv = "RELATED_IMAGE_OPERATOR"

// logLevelEnv sets the log level where flags cannot be set: an OLM Subscription's config.env.
// --zap-log-level, when given, wins.
const logLevelEnv = "LOG_LEVEL"

// pprofBindAddressEnv sets --pprof-bind-address where flags cannot be set: an OLM
// Subscription's config.env.
const pprofBindAddressEnv = "PPROF_BIND_ADDRESS"

// defaultEtcdRepository serves when RELATED_IMAGE_ETCD is unset: the etcd project's own images.
const defaultEtcdRepository = "gcr.io/etcd-development/etcd"

type options struct {
	metricsAddr      string
	secureMetrics    bool
	enableHTTP2      bool
	probeAddr        string
	pprofAddr        string
	leaderElect      bool
	leaderElectionNS string
	leaderElection   leaderElectionTimes
	watchNamespaces  string
	zap              zap.Options
	// etcdDial is no flag: nil, the real etcd client, but for the scale benchmark's scripted
	// members (main_scale_bench_test.go).
	etcdDial func(etcd.Config) (etcd.Client, error)
}

func parseFlags(args []string) (options, error) {
	o := options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to; \"0\" turns metrics off.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS, authenticated and authorized through the API server.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Allow HTTP/2 on the metrics server (off by default: HTTP/2 Rapid Reset and Stream Cancellation CVEs).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", os.Getenv(pprofBindAddressEnv),
		"Address of Go's profiling endpoints (/debug/pprof/), unauthenticated; empty (the default) or \"0\" turns them off. "+
			"127.0.0.1:6060 with kubectl port-forward keeps them inside the pod. Defaults to $"+pprofBindAddressEnv+".")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Hold a Lease so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "",
		"Namespace of the leader-election Lease; empty means the pod's own namespace.")
	fs.DurationVar(&o.leaderElection.lease, "leader-election-lease-duration", defaultLeaderElection.lease,
		"How long a replica waits, after the leader last renewed the Lease, before it takes over: with the retry period, how long a crashed leader's work waits.")
	fs.DurationVar(&o.leaderElection.renewDeadline, "leader-election-renew-deadline", defaultLeaderElection.renewDeadline,
		"How long the leader tries to renew the Lease before it stops leading; shorter than the lease duration, so that it stops before another replica may take over.")
	fs.DurationVar(&o.leaderElection.retryPeriod, "leader-election-retry-period", defaultLeaderElection.retryPeriod,
		"How often the leader renews the Lease (one write each time) and the other replicas try to take it.")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", os.Getenv(watchNamespacesEnv),
		"Comma-separated namespaces to watch; empty means all namespaces. Defaults to $"+watchNamespacesEnv+".")
	level, err := logLevel(os.Getenv(logLevelEnv))
	if err != nil {
		return o, err
	}
	o.zap.Level = level
	o.zap.BindFlags(fs)
	return o, fs.Parse(args)
}

// leaderElectionTimes are the leader election's lease duration, renew deadline and retry
// period. The leader writes the Lease once per retry period, whatever its clusters do: the
// largest part of an idle operator's writes. A leader that crashes is replaced after at most
// the lease duration plus a retry period (with client-go's jitter, 1.2 of it) — a leader that
// stops cleanly hands over at once (LeaderElectionReleaseOnCancel). docs/performance.md has the
// failover times and writes measured for these and for controller-runtime's 15 s/10 s/2 s.
type leaderElectionTimes struct{ lease, renewDeadline, retryPeriod time.Duration }

// defaultLeaderElection renews every 2.5 s rather than controller-runtime's 2 s (a fifth fewer
// writes) and keeps its 10 s renew deadline: an API server that answers no renewal for that
// long restarts the leader, and a 7 s deadline did so once in CI, the two cores at load 20. The
// lease, 2.5 s above the deadline so that a leader that cannot renew stops before another may
// take over, is 12.5 s rather than 15 s, so that a crashed leader is replaced no later than
// under controller-runtime's times: a waiting replica looks every retry period stretched by up
// to 2.2× (client-go's jitter), and may see the last renewal that late, so the worst case is
// the lease plus 4.4 retry periods, 23.5 s against 23.8 s. The measured failovers are in
// docs/performance.md; renewing every 4 s halved the writes but let one failover take 23.4 s.
var defaultLeaderElection = leaderElectionTimes{lease: 12500 * time.Millisecond, renewDeadline: 10 * time.Second, retryPeriod: 2500 * time.Millisecond}

// logLevel reads LOG_LEVEL: debug logs every decision, waits included; info (the default) each
// step taken; error only failures.
func logLevel(value string) (zapcore.Level, error) {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "", "info":
		return zapcore.InfoLevel, nil
	case "debug":
		return zapcore.DebugLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("%s=%q: want debug, info or error", logLevelEnv, value)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(runAgent(os.Args[2:]))
	}
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	if err := run(opts); err != nil {
		ctrl.Log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

func run(opts options) error {
	mgr, err := newManager(ctrl.GetConfigOrDie(), opts, controllers.CacheOptions(splitNamespaces(opts.watchNamespaces)))
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting manager", "watchNamespaces", opts.watchNamespaces, "leaderElection", opts.leaderElect)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// newManager is the operator's manager with every reconciler and probe, its informers set up
// by cacheOptions, and cert-manager's Certificates among them where cert-manager is installed.
func newManager(cfg *rest.Config, opts options, cacheOptions cache.Options) (ctrl.Manager, error) {
	certManager, err := detectCertManager(cfg)
	if err != nil {
		return nil, err
	}
	if certManager {
		cacheOptions = controllers.WithCertificates(cacheOptions)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(etcdv1alpha1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions(opts),
		HealthProbeBindAddress:  opts.probeAddr,
		PprofBindAddress:        opts.pprofAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        "etcd-operator.etcd.database.dev",
		LeaderElectionNamespace: opts.leaderElectionNS,
		LeaseDuration:           &opts.leaderElection.lease,
		RenewDeadline:           &opts.leaderElection.renewDeadline,
		RetryPeriod:             &opts.leaderElection.retryPeriod,
		// Released on a clean shutdown, so an upgraded operator takes over at once instead of
		// waiting out the lease.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions,
		Controller:                    controllerConfig(),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}

	upgradeable, err := controllers.OLMUpgradeableCondition(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	plat, err := detectPlatform(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	if err := controllers.SetupWithManager(mgr, controllers.Options{
		DefaultEtcdImages: etcdImages(os.Getenv(relatedImageEtcdEnv), os.Environ()),
		AgentImage:        os.Getenv(relatedImageOperatorEnv),
		Pods: resources.PodSettings{
			Env:                proxy.ReadProxyVarsFromEnv(),
			PlatformAssignsIDs: plat.AssignsPodIDs,
		},
		UpgradeableCondition: upgradeable,
		CertManager:          certManager,
		EtcdDial:             opts.etcdDial,
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	return mgr, nil
}

// detectPlatform tells from the API server what the distribution decides for pods, and says it.
func detectPlatform(cfg *rest.Config) (platform.Platform, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return platform.Platform{}, fmt.Errorf("discovery client: %w", err)
	}
	plat, err := platform.Detect(d)
	if err != nil {
		return platform.Platform{}, err
	}
	ctrl.Log.Info("platform detected", "platform", plat.Name, "podIDsAssignedByPlatform", plat.AssignsPodIDs)
	return plat, nil
}

// detectCertManager tells whether the API server serves cert-manager's Certificates, and says
// it: read once, at start, so a cert-manager installed later is used after a restart.
func detectCertManager(cfg *rest.Config) (bool, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("discovery client: %w", err)
	}
	served, err := platform.CertManagerServed(d)
	if err != nil {
		return false, err
	}
	ctrl.Log.Info("cert-manager detected", "certificatesServed", served)
	return served, nil
}

func metricsOptions(opts options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: opts.metricsAddr, SecureServing: opts.secureMetrics}
	if !opts.enableHTTP2 {
		m.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	if opts.secureMetrics {
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return m
}

// controllerConfig is what every controller shares. The failpoint build (make failpoint-image)
// can let a panic in a reconcile end the process, as a crash at that point would: by default
// controller-runtime recovers it, and the reconcile only fails.
func controllerConfig() config.Controller {
	// gofail: var crashOnPanic struct{}
	// return config.Controller{RecoverPanic: new(bool)}
	return config.Controller{}
}

// etcdImages are the images of clusters that set no spec.repository, from RELATED_IMAGE_ETCD:
// <its repository>:v<version> by tag, but for the version of an image pinned by digest, which is
// run as it is. That version is the default one (the image the bundle pins is the default
// version's), unless a v<version> tag stands before the digest; and but for each version a
// RELATED_IMAGE_ETCD_V<major>_<minor>_<patch> of environ names, whose image is that one, as given.
func etcdImages(relatedImage string, environ []string) resources.EtcdImages {
	images := resources.EtcdImagesOf(cmp.Or(relatedImage, defaultEtcdRepository), etcdv1alpha1.DefaultEtcdVersion)
	for _, kv := range environ {
		name, ref, _ := strings.Cut(kv, "=")
		v, ok := strings.CutPrefix(name, relatedImageEtcdVersionPrefix)
		if !ok || ref == "" {
			continue
		}
		images = images.WithVersion(strings.ReplaceAll(v, "_", "."), ref)
	}
	return images
}

func splitNamespaces(list string) []string {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}

// runAgent is the image's other job: `manager agent ...` runs in the backup, restore, verify,
// point-in-time, preserve-data and read-log Jobs the operator makes and in restored members'
// init containers, with the user's volumes and credentials, and reports through its
// termination message; and as the archiver of a backup with spec.continuous (`archive`, a
// Deployment), which reports on its status port.
func runAgent(args []string) int {
	agent.LimitMemory()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	switch {
	case len(args) == 1 && args[0] == "backup":
		return agent.RunBackupJob(ctx)
	case len(args) == 1 && args[0] == "restore-fetch":
		return agent.RunRestoreFetch(ctx)
	case len(args) == 1 && args[0] == "verify-fetch":
		return agent.RunVerifyFetch(ctx)
	case len(args) == 1 && args[0] == "verify":
		return agent.RunVerify(ctx)
	case len(args) == 1 && args[0] == "restore-install":
		return agent.RunRestoreInstall()
	case len(args) == 1 && args[0] == "member-restore-fetch":
		return agent.RunMemberRestoreFetch(ctx)
	case len(args) > 1 && args[0] == "member-restore-install":
		return agent.RunMemberRestoreInstall(ctx, args[1:])
	case len(args) == 1 && args[0] == "pitr-fetch":
		return agent.RunPointInTimeFetch(ctx)
	case len(args) == 1 && args[0] == "pitr-replay":
		return agent.RunPointInTimeReplay(ctx)
	case len(args) == 1 && args[0] == "preserve-data":
		return agent.RunPreserveData()
	case len(args) == 1 && args[0] == "read-log":
		return agent.RunReadLog()
	case len(args) == 1 && args[0] == "archive":
		return agent.RunArchive(ctx)
	default:
		fmt.Fprintln(os.Stderr, "usage: manager agent backup|restore-fetch|restore-install|member-restore-fetch|member-restore-install ETCDUTL ARGS...|verify-fetch|verify|pitr-fetch|pitr-replay|preserve-data|read-log|archive")
		return 2
	}
}
