package agent

import (
	"os"
	"runtime/debug"
	"strconv"

	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// heapShareOfLimit is the share of the container's memory limit the Go runtime may use before
// its collector works to stay under it. The rest is for what the runtime does not count: the
// binary's own pages (about 44 MiB of a 93 MB binary, charged to the container as it runs)
// and the kernel's buffers for the container's files and connections.
const heapShareOfLimit = 0.75

// LimitMemory sets the Go runtime's soft memory limit to heapShareOfLimit of the container's
// memory limit (jobspec.MemoryLimitEnv), unless GOMEMLIMIT is set. By default the collector
// lets the heap grow to twice what is live: near the limit, a burst of garbage (a part's
// buffers retried, a segment that grew) would be killed by the kernel rather than collected.
// Under the soft limit the collector runs more often instead, and the stream goes on.
func LimitMemory() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	containerLimit, err := strconv.ParseInt(os.Getenv(jobspec.MemoryLimitEnv), 10, 64)
	if err != nil || containerLimit <= 0 {
		return // not in a container the operator made
	}
	debug.SetMemoryLimit(int64(float64(containerLimit) * heapShareOfLimit))
}
