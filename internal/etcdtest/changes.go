package etcdtest

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// Revisions are the revisions after after through through as etcd's watch gives them, each with
// every event it made, in order: what an archive of the keyspace holds of them.
func Revisions(t testing.TB, cl *clientv3.Client, after, through int64) []etcd.Revision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []etcd.Revision
	for resp := range cl.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(after+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			rev := ev.Kv.ModRevision
			if n := len(out); n == 0 || out[n-1].Revision != rev {
				out = append(out, etcd.Revision{Revision: rev})
			}
			e := etcd.Event{Delete: ev.Type == mvccpb.DELETE, Key: ev.Kv.Key, CreateRevision: ev.Kv.CreateRevision, ModRevision: rev, Version: ev.Kv.Version, Lease: ev.Kv.Lease}
			if !e.Delete {
				e.Value = ev.Kv.Value
			}
			out[len(out)-1].Events = append(out[len(out)-1].Events, e)
		}
		if n := len(out); n > 0 && out[n-1].Revision >= through {
			return out
		}
	}
	t.Fatalf("the watch ended before revision %d", through)
	return nil
}
