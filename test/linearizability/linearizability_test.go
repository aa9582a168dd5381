package linearizability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// A history recorded from a real etcd is linearizable, and the workload exercises every kind of
// operation on contended keys.
func TestWorkloadOnRealEtcdIsLinearizable(t *testing.T) {
	server := etcdtest.StartCluster(t, 1)[0]
	h := runWorkload(t, Config{Endpoints: []string{server.ClientURL}, Prefix: "/lin", Clients: 6, Keys: 8}, 500, nil)
	counts := h.Counts()
	if counts.Gets < 100 || counts.Puts < 100 || counts.Deletes < 30 {
		t.Fatalf("too few operations to prove anything: %v", counts)
	}
	if r := Verify(t, h, time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("verdict %s", r.Verdict)
	}
}

// etcd killed and restarted under the workload: writes in flight when it died, and writes sent
// while it was down, failed. Some of those may have been applied and some not; the history is
// linearizable either way, and none of them is dropped.
func TestWorkloadAcrossAnEtcdRestartIsLinearizable(t *testing.T) {
	server := etcdtest.StartCluster(t, 1)[0]
	h := runWorkload(t, Config{Endpoints: []string{server.ClientURL}, Prefix: "/lin", OpTimeout: time.Second}, 200, func() {
		time.Sleep(time.Second)
		server.Stop()
		// Down for three operation timeouts: a read begun while etcd is down is retried by the
		// client until its timeout, and with etcd back within one it may succeed. Down for 1.5 s,
		// every read did once in `make test` (the reads' failures this test needs: none).
		time.Sleep(3 * time.Second)
		server.Start(t, "new", etcdtest.InitialCluster(server))
		server.WaitReady(t)
	})
	counts := h.Counts()
	if counts.Indeterminate == 0 || counts.FailedGets == 0 {
		t.Fatalf("no write or read failed while etcd was down: the test proves nothing: %v", counts)
	}
	if r := Verify(t, h, time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("verdict %s", r.Verdict)
	}
}

// Three members, each killed and restarted in turn under the workload, its clients spread over
// all of them: reads served by followers, writes through leader changes, indeterminate writes
// from members that died with them in flight — linearizable.
func TestWorkloadOnAThreeMemberClusterLosingMembersIsLinearizable(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	cfg := Config{Endpoints: etcdtest.ClientURLs(servers), Prefix: "/lin", Clients: 6, OpTimeout: time.Second}
	h := runWorkload(t, cfg, 600, func() {
		for _, s := range servers {
			time.Sleep(500 * time.Millisecond)
			s.Stop()
			time.Sleep(time.Second)
			s.Start(t, "new", etcdtest.InitialCluster(servers...))
			s.WaitReady(t)
		}
	})
	if r := Verify(t, h, time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("verdict %s", r.Verdict)
	}
}

// A real history with one read made stale — after a put completed, the read returns the value
// that put replaced — is not linearizable: Verify fails the test and writes the visualization
// under $ARTIFACTS.
func TestStaleReadInARealHistoryIsIllegal(t *testing.T) {
	server := etcdtest.StartCluster(t, 1)[0]
	h := runWorkload(t, Config{Endpoints: []string{server.ClientURL}, Prefix: "/lin"}, 200, nil)
	if r := Check(h, time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("the recorded history: verdict %s, want Ok before it is tampered with", r.Verdict)
	}

	stale := staleReadAfterPut(t, h)
	artifacts := t.TempDir()
	t.Setenv("ARTIFACTS", artifacts)
	verified := &recordingT{T: t}
	r := Verify(verified, h, time.Minute)
	t.Logf("with %s made stale: %v", describeOperation(stale.Input, stale.Output), r)
	if r.Verdict != porcupine.Illegal || r.Err() == nil || len(verified.errors) == 0 {
		t.Fatalf("a stale read after a completed put: verdict %s, error %v, test failed with %q; want Illegal, an error and a failed test",
			r.Verdict, r.Err(), verified.errors)
	}
	html, err := os.ReadFile(filepath.Join(artifacts, t.Name(), "linearizability.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<html") || !strings.Contains(string(html), stale.Input.(input).Key) {
		t.Fatalf("the visualization (%d bytes) is not an HTML page about key %s", len(html), stale.Input.(input).Key)
	}
}

// recordingT keeps the errors Verify reports instead of failing the test.
type recordingT struct {
	*testing.T
	errors []string
}

func (r *recordingT) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

func (r *recordingT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// staleReadAfterPut finds a get that read what a completed put wrote, called after that put
// returned, and makes it return the value the put replaced instead. Every value is written by
// one put only, so once the put has replaced it nothing can bring it back: the result is
// illegal whatever else happened concurrently.
func staleReadAfterPut(t *testing.T, h *History) porcupine.Operation {
	t.Helper()
	puts := map[string]porcupine.Operation{}
	for _, op := range h.completed {
		if in := op.Input.(input); in.Kind == opPut && op.Output.(output).Value != "" {
			puts[in.Value] = op
		}
	}
	for i, op := range h.completed {
		in, out := op.Input.(input), op.Output.(output)
		if put, ok := puts[out.Value]; ok && in.Kind == opGet && op.Call > put.Return {
			h.completed[i].Output = output{Value: put.Output.(output).Value}
			return h.completed[i]
		}
	}
	t.Fatal("no get in the history read a put that replaced a value: run the workload longer")
	return porcupine.Operation{}
}

// An indeterminate put may have taken effect or not: a later read of its value and a later read
// of the value before it are both linearizable. It cannot have taken effect before it was called.
func TestIndeterminatePut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{{
		name: "took effect: a later read sees it",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedPut(1, "k", "v2", 20),
			get(2, "k", "v2", 30, 40),
			get(2, "k", "v2", 50, 60),
		},
		want: porcupine.Ok,
	}, {
		name: "did not take effect: later reads never see it",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedPut(1, "k", "v2", 20),
			get(2, "k", "v1", 30, 40),
			put(2, "k", "v3", "v1", 50, 60),
			get(2, "k", "v3", 70, 80),
		},
		want: porcupine.Ok,
	}, {
		name: "took effect late: after reads that did not see it",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedPut(1, "k", "v2", 20),
			get(2, "k", "v1", 30, 40),
			get(2, "k", "v2", 50, 60),
		},
		want: porcupine.Ok,
	}, {
		name: "took effect: a later write replaced it",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedPut(1, "k", "v2", 20),
			put(2, "k", "v3", "v2", 30, 40),
			get(2, "k", "v3", 50, 60),
		},
		want: porcupine.Ok,
	}, {
		name: "seen only before it was called, after a write that is unknown too",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedDelete(3, "k", 15),
			get(2, "k", "v2", 20, 30),
			failedPut(1, "k", "v2", 40),
		},
		want: porcupine.Illegal,
	}, {
		name: "seen before it was called",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			get(2, "k", "v2", 20, 30),
			failedPut(1, "k", "v2", 40),
		},
		want: porcupine.Illegal,
	}, {
		name: "the same put acknowledged, and a later read does not see it",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			put(1, "k", "v2", "v1", 20, 25),
			get(2, "k", "v1", 30, 40),
		},
		want: porcupine.Illegal,
	}, {
		name: "an indeterminate delete, seen or not",
		history: []porcupine.Operation{
			put(0, "k", "v1", "", 0, 10),
			failedDelete(1, "k", 20),
			get(2, "k", "v1", 30, 40),
			get(2, "k", "", 50, 60),
		},
		want: porcupine.Ok,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{}
			for _, op := range tc.history {
				if op.Output.(output).Indeterminate {
					h.indeterminate = append(h.indeterminate, op)
				} else {
					h.completed = append(h.completed, op)
				}
			}
			if r := Check(h, time.Minute); r.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s", r.Verdict, tc.want)
			}
		})
	}
}

// A check that runs out of time is an error, never a pass. Twenty-four deletes of unknown
// outcome, all concurrent, and a read of a value nobody wrote: before it can say Illegal, the
// checker tries the read after each of the 2^24 subsets of the deletes, which takes minutes
// (18 deletes: 0.8s), not 100ms.
func TestUndecidedIsAnError(t *testing.T) {
	h := &History{}
	for i := range 24 {
		h.indeterminate = append(h.indeterminate, failedDelete(i, "k", 0))
	}
	h.completed = append(h.completed, get(24, "k", "nobody wrote this", 10, 20))
	r := Check(h, 100*time.Millisecond)
	if r.Verdict != porcupine.Unknown || r.Err() == nil {
		t.Fatalf("verdict %s, error %v: want Unknown and an error", r.Verdict, r.Err())
	}
	t.Logf("%v", r.Err())
}

// runWorkload runs the workload, with during (if any) alongside, until at least ops operations
// have completed, and returns its history.
func runWorkload(t *testing.T, cfg Config, ops int, during func()) *History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	for deadline := time.Now().Add(time.Minute); w.Completed() < ops; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations completed in a minute, want %d", w.Completed(), ops)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := w.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func put(client int, key, value, replaced string, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: input{Kind: opPut, Key: key, Value: value}, Call: call, Output: output{Value: replaced}, Return: ret}
}

func failedPut(client int, key, value string, call int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: input{Kind: opPut, Key: key, Value: value}, Call: call, Output: output{Indeterminate: true}}
}

func failedDelete(client int, key string, call int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: input{Kind: opDelete, Key: key}, Call: call, Output: output{Indeterminate: true}}
}

func get(client int, key, value string, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: input{Kind: opGet, Key: key}, Call: call, Output: output{Value: value}, Return: ret}
}
