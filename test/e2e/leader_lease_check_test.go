package e2e

import (
	"strings"
	"testing"
)

// The two ways a manager's log says "leader election lost": the manager stopped because a
// renewal did not come through in time (main's "manager stopped"), and the manager stopping
// cleanly (SIGTERM on a rollout or a deleted pod), where controller-runtime cancels the elector
// and reports its callback's error after the stop sequence began. Only the first is a loss.
const (
	lostLeaseLine = `{"level":"error","ts":"2026-11-29T18:40:02Z","msg":"manager stopped","error":"leader election lost"}`
	cleanStopLine = `{"level":"error","ts":"2026-11-29T18:46:25Z","msg":"error received after stop sequence was engaged","error":"leader election lost","stacktrace":"sigs.k8s.io/controller-runtime/pkg/manager.(*controllerManager).engageStopProcedure.func1\n\t/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/manager/internal.go:533"}`
)

func TestOperatorKeptItsLeaseCountsOnlyRealLosses(t *testing.T) {
	pod := "etcd-operator-system/etcd-operator-controller-manager-668bbf6764-flswt/"
	cases := []struct {
		name     string
		logs     map[string][]byte
		wantLoss int
	}{
		{"a clean stop is not a loss", map[string][]byte{pod + "manager#0": []byte(`{"msg":"starting"}` + "\n" + cleanStopLine + "\n")}, 0},
		{"a renewal that did not come through is", map[string][]byte{pod + "manager#0": []byte(lostLeaseLine + "\n")}, 1},
		{"only the manager's container counts", map[string][]byte{pod + "sidecar#0": []byte(lostLeaseLine + "\n")}, 0},
		{"every restart of the container is read", map[string][]byte{
			pod + "manager#0": []byte(lostLeaseLine + "\n"),
			pod + "manager#1": []byte(cleanStopLine + "\n" + lostLeaseLine + "\n"),
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := operatorKeptItsLease(c.logs)
			got := 0
			if err != nil {
				got = strings.Count(err.Error(), "\n")
			}
			if got != c.wantLoss {
				t.Fatalf("losses named: %d, want %d (%v)", got, c.wantLoss, err)
			}
		})
	}
}
