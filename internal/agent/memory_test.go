package agent

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// The agent keeps the Go heap under three quarters of its container's memory limit, as the
// downward API gives it, and leaves a limit set by GOMEMLIMIT, or none given, alone.
func TestAgentKeepsItsHeapUnderItsContainersLimit(t *testing.T) {
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	for _, tc := range []struct {
		name, containerLimit, gomemlimit string
		want                             int64
	}{
		{name: "256Mi limit", containerLimit: "268435456", want: 192 << 20},
		{name: "GOMEMLIMIT set", containerLimit: "268435456", gomemlimit: "100MiB", want: math.MaxInt64},
		{name: "no limit given", want: math.MaxInt64},
		{name: "not a number", containerLimit: "256Mi", want: math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			t.Setenv(jobspec.MemoryLimitEnv, tc.containerLimit)
			if tc.gomemlimit != "" {
				t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			}
			LimitMemory()
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("soft memory limit %d, want %d", got, tc.want)
			}
		})
	}
}
