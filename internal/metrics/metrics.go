// Package metrics exports what the reconcilers observe of each EtcdCluster, EtcdBackup and
// EtcdRestore as Prometheus series on controller-runtime's registry, which the manager serves
// at its secure metrics endpoint. Every series is labelled by the object's namespace and name.
//
// The values are a pure function of the object's status, read where status is written: the
// series say what status says, at the moment it is written. Each family keeps the last values
// of each object and emits them at scrape time, so that a member, an alarm or an operation
// that went away takes its series with it, and Forget removes every series of a deleted
// object at once.
package metrics

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const namespace = "etcd_operator"

// objectLabels name the object every series is about.
var objectLabels = []string{"namespace", "name"}

// Clusters, Backups and Restores are the families, registered on controller-runtime's registry.
var (
	Clusters = newClusterCollector()
	Backups  = newBackupCollector()
	Restores = newRestoreCollector()
)

func init() {
	ctrlmetrics.Registry.MustRegister(Clusters, Backups, Restores)
}

// store holds the last recorded entry of each object, for a collector to emit at scrape time.
type store[E any] struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]E
}

// update replaces the entry of key with what change makes of the previous one (the zero E
// when there was none).
func (s *store[E]) update(key types.NamespacedName, change func(previous E) E) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[types.NamespacedName]E{}
	}
	s.entries[key] = change(s.entries[key])
}

func (s *store[E]) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, key)
}

// each calls emit for every entry, in a stable order, under the lock.
func (s *store[E]) each(emit func(key types.NamespacedName, e E)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(s.entries), func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, k := range keys {
		emit(k, s.entries[k])
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, append(slices.Clone(objectLabels), labels...), nil)
}

// emitter sends const metrics of one object, prefixed with its labels.
type emitter struct {
	ch  chan<- prometheus.Metric
	key types.NamespacedName
}

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{e.key.Namespace, e.key.Name}, labels...)...)
}

func (e emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{e.key.Namespace, e.key.Name}, labels...)...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
