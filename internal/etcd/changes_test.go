package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// TestFollowDeliversEveryRevisionAndReplayRebuildsTheKeyspace follows a workload of every kind
// of write etcd makes revisions of, checks each delivered revision against a range read of the
// source at it, then replays them into a second etcd and compares the two keyspaces whole.
func TestFollowDeliversEveryRevisionAndReplayRebuildsTheKeyspace(t *testing.T) {
	source := etcdtest.StartCluster(t, 1)
	raw := source[0].Client(t)
	last := writeWorkload(t, raw)

	feed := newFeed(t, source)
	revs := follow(t, feed, 1, last)
	for i, rev := range revs {
		if rev.Revision != int64(i+2) {
			t.Fatalf("delivered revision %d at position %d, want %d: revisions must follow one another from 2", rev.Revision, i, i+2)
		}
	}
	model := map[string]mvccpb.KeyValue{}
	for _, rev := range revs {
		apply(model, rev)
		if want := rangeRead(t, raw, rev.Revision); !reflect.DeepEqual(sorted(model), want) {
			t.Fatalf("after revision %d the delivered events imply\n%v\nbut the source held\n%v", rev.Revision, sorted(model), want)
		}
	}

	scratch := etcdtest.StartCluster(t, 1)
	replayer, err := etcd.NewReplayer(etcd.Config{Endpoints: etcdtest.ClientURLs(scratch)})
	if err != nil {
		t.Fatal(err)
	}
	defer replayer.Close()
	if err := replayer.HoldLeases(t.Context()); err != nil {
		t.Fatal(err)
	}
	ttls := leaseTTLs(t, feed, revs)
	for _, rev := range revs {
		if err := replayer.Apply(t.Context(), rev, ttls); err != nil {
			t.Fatal(err)
		}
	}
	got, err := replayer.Revision(t.Context())
	if err != nil || got != last {
		t.Fatalf("the scratch etcd is at revision %d (%v), want %d", got, err, last)
	}
	scratchRaw := scratch[0].Client(t)
	if want, have := rangeRead(t, raw, last), rangeRead(t, scratchRaw, last); !reflect.DeepEqual(want, have) {
		t.Fatalf("replayed keyspace differs:\nsource  %v\nscratch %v", want, have)
	}
	assertLease(t, scratchRaw, leaseOf(t, raw, "leased/kept"), 30)
}

// TestReplayRefusesARevisionOverTheWrongKeyspace: a revision applied to a store that does not
// hold the keyspace before it must not land as another revision unnoticed.
func TestReplayRefusesARevisionOverTheWrongKeyspace(t *testing.T) {
	scratch := etcdtest.StartCluster(t, 1)
	replayer, err := etcd.NewReplayer(etcd.Config{Endpoints: etcdtest.ClientURLs(scratch)})
	if err != nil {
		t.Fatal(err)
	}
	defer replayer.Close()
	rev := etcd.Revision{Revision: 7, Events: []etcd.Event{{Key: []byte("a"), Value: []byte("v"), CreateRevision: 7, ModRevision: 7, Version: 1}}}
	if err := replayer.Apply(t.Context(), rev, nil); err == nil {
		t.Fatal("revision 7 applied over a fresh store (revision 1) was accepted")
	}
}

// TestFollowAdvancesProgressOnAQuietCluster: with no writes, etcd's own progress notifications
// come every ten minutes; Follow asks for them so a segment can close.
func TestFollowAdvancesProgressOnAQuietCluster(t *testing.T) {
	source := etcdtest.StartCluster(t, 1)
	raw := source[0].Client(t)
	resp, err := raw.Put(t.Context(), "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	feed := newFeed(t, source)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	err = feed.Follow(ctx, resp.Header.Revision, func(revs []etcd.Revision, progress int64) error {
		if len(revs) > 0 {
			return fmt.Errorf("delivered %d revisions on a quiet cluster", len(revs))
		}
		if progress == resp.Header.Revision {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("no progress at revision %d on a quiet cluster: %v", resp.Header.Revision, err)
	}
}

// TestFollowFromACompactedRevisionIsACompactedError.
func TestFollowFromACompactedRevisionIsACompactedError(t *testing.T) {
	source := etcdtest.StartCluster(t, 1)
	raw := source[0].Client(t)
	last := writeWorkload(t, raw)
	if _, err := raw.Compact(t.Context(), last-3); err != nil {
		t.Fatal(err)
	}
	feed := newFeed(t, source)
	err := feed.Follow(t.Context(), 1, func([]etcd.Revision, int64) error { return nil })
	var compacted *etcd.CompactedError
	if !errors.As(err, &compacted) || compacted.CompactRevision != last-3 {
		t.Fatalf("follow from revision 2 after a compaction at %d: %v, want a CompactedError at %d", last-3, err, last-3)
	}
	// The compaction revision's own deletes are gone: following from the revision before it
	// would miss them.
	if err := feed.Follow(t.Context(), last-4, stopAt(last)); !errors.As(err, &compacted) {
		t.Fatalf("follow from the revision before the compaction: %v, want a CompactedError", err)
	}
	if err := feed.Follow(t.Context(), last-3, stopAt(last)); !errors.Is(err, errStop) {
		t.Fatalf("follow from the compaction revision: %v", err)
	}
}

// TestFollowCarriesOnAcrossARestartOfTheMember: a member going away and coming back loses no
// revision and repeats none.
func TestFollowCarriesOnAcrossARestartOfTheMember(t *testing.T) {
	source := etcdtest.StartCluster(t, 1)
	raw := source[0].Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	putKeys(ctx, raw, "before", 10)
	feed := newFeed(t, source)
	var got []int64
	restarted := false
	err := feed.Follow(ctx, 1, func(revs []etcd.Revision, progress int64) error {
		for _, r := range revs {
			got = append(got, r.Revision)
		}
		switch {
		case progress >= 21:
			return errStop
		case progress >= 11 && !restarted:
			restarted = true
			source[0].Terminate(t)
			source[0].Start(t, "existing", etcdtest.InitialCluster(source[0]))
			go putKeys(ctx, raw, "after", 10)
		}
		return nil
	})
	if !errors.Is(err, errStop) || !restarted {
		t.Fatalf("follow: %v (restarted: %v)", err, restarted)
	}
	for i, r := range got {
		if r != int64(i+2) {
			t.Fatalf("delivered %v: want every revision from 2, once", got)
		}
	}
}

var errStop = errors.New("stop following")

// putKeys writes n keys one by one, each until it lands, until ctx ends.
func putKeys(ctx context.Context, c *clientv3.Client, prefix string, n int) {
	for i := 0; i < n && ctx.Err() == nil; {
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Put(callCtx, fmt.Sprintf("%s-%02d", prefix, i), "v")
		cancel()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		i++
	}
}

func newFeed(t *testing.T, servers []*etcdtest.Server) *etcd.ChangeFeed {
	t.Helper()
	feed, err := etcd.NewChangeFeed(etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = feed.Close() })
	return feed
}

// follow collects what Follow delivers after revision after until progress reaches last.
func follow(t *testing.T, feed *etcd.ChangeFeed, after, last int64) []etcd.Revision {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var revs []etcd.Revision
	err := feed.Follow(ctx, after, func(got []etcd.Revision, progress int64) error {
		revs = append(revs, got...)
		if progress >= last {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("follow: %v", err)
	}
	return revs
}

func stopAt(last int64) func([]etcd.Revision, int64) error {
	return func(_ []etcd.Revision, progress int64) error {
		if progress >= last {
			return errStop
		}
		return nil
	}
}

// writeWorkload makes a revision of every kind: puts, an empty value, overwrites, deletes,
// multi-key txns (one whose deletes surround a put), a range delete, leased keys, a lease
// revoked with its keys. It returns the last revision.
func writeWorkload(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c", "range/1", "range/2", "range/3", "apart/a", "apart/b", "apart/c", "around/a", "around/c"} {
		must(c.Put(ctx, k, "v-"+k))
	}
	must(c.Put(ctx, "a", "second"))
	must(c.Put(ctx, "empty", ""))
	must(c.Delete(ctx, "b"))
	must(c.Txn(ctx).Then(clientv3.OpPut("x", "1"), clientv3.OpPut("y", "2"), clientv3.OpDelete("c")).Commit())
	must(c.Delete(ctx, "range/", clientv3.WithPrefix()))
	// Deletes whose range holds a key that stays, and deletes around a key the same txn puts:
	// neither may be replayed as one range delete.
	must(c.Txn(ctx).Then(clientv3.OpDelete("apart/a"), clientv3.OpDelete("apart/c")).Commit())
	must(c.Txn(ctx).Then(clientv3.OpDelete("around/a"), clientv3.OpDelete("around/c"), clientv3.OpPut("around/b", "new")).Commit())
	kept, err := c.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	must(c.Put(ctx, "leased/kept", "1", clientv3.WithLease(kept.ID)))
	must(c.Put(ctx, "leased/kept", "2", clientv3.WithLease(kept.ID)))
	revoked, err := c.Grant(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	must(c.Put(ctx, "leased/gone-1", "1", clientv3.WithLease(revoked.ID)))
	must(c.Put(ctx, "leased/gone-2", "1", clientv3.WithLease(revoked.ID)))
	must(c.Revoke(ctx, revoked.ID))
	resp, err := c.Put(ctx, "z", "last")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func apply(model map[string]mvccpb.KeyValue, rev etcd.Revision) {
	for _, ev := range rev.Events {
		if ev.Delete {
			delete(model, string(ev.Key))
			continue
		}
		model[string(ev.Key)] = mvccpb.KeyValue{Key: ev.Key, Value: ev.Value, CreateRevision: ev.CreateRevision, ModRevision: ev.ModRevision, Version: ev.Version, Lease: ev.Lease}
	}
}

// kv is a key as a range read shows it, comparable.
type kv struct {
	Key, Value                           string
	CreateRevision, ModRevision, Version int64
	Lease                                int64
}

func sorted(model map[string]mvccpb.KeyValue) []kv {
	out := []kv{}
	for _, v := range model {
		out = append(out, kv{string(v.Key), string(v.Value), v.CreateRevision, v.ModRevision, v.Version, v.Lease})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func rangeRead(t *testing.T, c *clientv3.Client, rev int64) []kv {
	t.Helper()
	resp, err := c.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	out := []kv{}
	for _, v := range resp.Kvs {
		out = append(out, kv{string(v.Key), string(v.Value), v.CreateRevision, v.ModRevision, v.Version, v.Lease})
	}
	return out
}

func leaseTTLs(t *testing.T, feed *etcd.ChangeFeed, revs []etcd.Revision) map[int64]int64 {
	t.Helper()
	ttls := map[int64]int64{}
	for _, rev := range revs {
		for _, ev := range rev.Events {
			if ev.Lease == 0 {
				continue
			}
			ttl, _, err := feed.LeaseTTL(t.Context(), ev.Lease)
			if err != nil {
				t.Fatal(err)
			}
			ttls[ev.Lease] = ttl
		}
	}
	return ttls
}

func leaseOf(t *testing.T, c *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := c.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %s: %v", key, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func assertLease(t *testing.T, c *clientv3.Client, id clientv3.LeaseID, grantedTTL int64) {
	t.Helper()
	resp, err := c.TimeToLive(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GrantedTTL != grantedTTL {
		t.Fatalf("lease %x replayed with TTL %d, want %d", id, resp.GrantedTTL, grantedTTL)
	}
}
