package etcdtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The members of one cluster agree; two servers that took the same number of writes, one
// value different, do not: the check the failpoint walk makes after every operation can fail.
func TestKeyspacesDifferSeesADivergedMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster := etcdtest.StartCluster(t, 3)
	a, b := etcdtest.NewServer(t, "a"), etcdtest.NewServer(t, "b")
	for _, s := range []*etcdtest.Server{a, b} {
		s.Start(t, "new", etcdtest.InitialCluster(s))
		s.WaitReady(t)
	}
	for i, s := range append(cluster[:1:1], a, b) {
		cl := s.Client(t)
		for _, v := range []string{"1", "2"} {
			if i == 2 && v == "2" {
				v = "two" // b's second write differs
			}
			if _, err := cl.Put(ctx, "k", v); err != nil {
				t.Fatal(err)
			}
		}
	}
	endpoints := func(servers ...*etcdtest.Server) map[string]string {
		m := map[string]string{}
		for _, s := range servers {
			m[s.Name] = s.ClientURL
		}
		return m
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.ClientURLs(append(cluster, a, b)), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The cluster's followers may not have applied the last write yet: the lowest revision is.
	if why := etcdtest.KeyspacesDiffer(ctx, cl, endpoints(cluster...)); why != "" {
		t.Errorf("the members of one cluster: %s", why)
	}
	if why := etcdtest.KeyspacesDiffer(ctx, cl, endpoints(a, b)); !strings.Contains(why, "differ") {
		t.Errorf("two servers with different data: %q, want them found to differ", why)
	}
}
