package etcd

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func put(key string, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, CreateRevision: rev, Version: 1}}
}

func response(header int64, events ...*clientv3.Event) clientv3.WatchResponse {
	return clientv3.WatchResponse{Header: pb.ResponseHeader{Revision: header}, Events: events}
}

// TestRevisionsOf covers what real etcd cannot be made to send: a batch whose header is ahead
// of its events (a catching-up watcher's), and responses that would break the archive.
func TestRevisionsOf(t *testing.T) {
	t.Run("progress is the last event's revision, not the header's", func(t *testing.T) {
		revs, progress, ok, err := revisionsOf(response(90, put("a", 5), put("b", 5), put("c", 6)), 4, 4)
		if err != nil || !ok || progress != 6 || len(revs) != 2 || len(revs[0].Events) != 2 {
			t.Fatalf("got %v %d %v %v", revs, progress, ok, err)
		}
	})
	t.Run("the revision already delivered is dropped", func(t *testing.T) {
		revs, progress, ok, err := revisionsOf(response(6, put("a", 5), put("b", 6)), 5, 5)
		if err != nil || !ok || progress != 6 || len(revs) != 1 || revs[0].Revision != 6 {
			t.Fatalf("got %v %d %v %v", revs, progress, ok, err)
		}
		if _, _, ok, err := revisionsOf(response(5, put("a", 5)), 5, 5); ok || err != nil {
			t.Fatalf("a response of the delivered revision alone delivered something (%v)", err)
		}
	})
	t.Run("a progress notification", func(t *testing.T) {
		revs, progress, ok, err := revisionsOf(response(9), 5, 5)
		if err != nil || !ok || progress != 9 || revs != nil {
			t.Fatalf("got %v %d %v %v", revs, progress, ok, err)
		}
	})
	t.Run("a skipped revision is refused", func(t *testing.T) {
		if _, _, _, err := revisionsOf(response(7, put("a", 7)), 5, 5); err == nil {
			t.Fatal("revision 7 after 5 accepted")
		}
	})
	t.Run("a revision split between responses is refused", func(t *testing.T) {
		// Revision 6 was delivered by the response before; more of it now is a split.
		if _, _, _, err := revisionsOf(response(7, put("c", 6), put("d", 7)), 6, 5); err == nil {
			t.Fatal("more of revision 6 after it was delivered accepted")
		}
	})
}
