package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The same with clientv3 and a real etcd: a client for a cluster with authentication whose
// members are gone blocks for clientv3's DialTimeout (5 s) getting its token; a healthy
// cluster's client is handed out meanwhile.
func TestAClusterWithoutQuorumHoldsUpNoOtherClusterOnRealEtcd(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	gone := etcdtest.FreeAddr(t)
	cache := etcd.NewCache()
	defer func() {
		cache.Forget("ns/healthy")
		cache.Forget("ns/no-quorum")
	}()
	stuck := make(chan time.Duration, 1)
	go func() {
		began := time.Now()
		_, _ = cache.Get("ns/no-quorum", etcd.Config{Endpoints: []string{"http://" + gone}, Username: "root", Password: "x"})
		stuck <- time.Since(began)
	}()
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	cl, err := cache.Get("ns/healthy", etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Members(context.Background()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if blocked := <-stuck; blocked < 4*time.Second {
		t.Fatalf("the client of the cluster without members returned after %v: the test needs it blocked", blocked)
	}
	t.Logf("the healthy cluster's client and member list: %v, beside a dial blocked for %v", took, time.Since(began))
	if took > 2*time.Second {
		t.Fatalf("the healthy cluster's client and member list took %v beside a blocked dial", took)
	}
}
