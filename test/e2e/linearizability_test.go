//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/test/linearizability"
)

// Checking a history of a few minutes takes milliseconds; the limit is for a history the
// checker finds hard, which fails the test (linearizability.Result.Err) rather than passing it.
const linearizabilityCheckTimeout = 2 * time.Minute

// startWorkload runs the linearizability workload (concurrent clients doing gets, puts and
// deletes on a few keys, each client over its own connection to the client Service) until
// checkLinearizable. It runs next to the writer, whose never-overwritten keys check that every
// acknowledged write is still there at the end; this one checks what clients saw meanwhile.
func startWorkload(t *testing.T, endpoint string) *linearizability.Workload {
	t.Helper()
	return startWorkloadWith(t, linearizability.Config{Endpoints: []string{endpoint}})
}

// startWorkloadWith runs the workload with cfg (its prefix the suite's).
func startWorkloadWith(t *testing.T, cfg linearizability.Config) *linearizability.Workload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Prefix = "/e2e/linearizability"
	w, err := linearizability.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// checkLinearizable stops the workload and fails t unless its history is linearizable; a
// history that is not is written as porcupine's visualization under $ARTIFACTS. It returns the
// history's counts, for summaries.
func checkLinearizable(t *testing.T, w *linearizability.Workload) linearizability.Counts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := w.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return linearizability.Verify(t, h, linearizabilityCheckTimeout).Counts
}
