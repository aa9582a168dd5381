package etcd_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// What quorum-loss recovery relies on, checked against real etcd: a member whose peers are
// gone for good still answers Status (its committed raft index, to choose the survivor; no
// leader, once it has heard none for an election timeout) and
// streams a snapshot (the copy kept before anything is rewritten); restarted once with
// --force-new-cluster it serves alone, with every key it had, and lists itself only.
func TestSurvivorOfQuorumLossAnswersStatusSnapshotsAndServesAloneWhenForced(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	survivor := servers[0]
	kv := survivor.Client(t)
	for i := range 50 {
		if _, err := kv.Put(t.Context(), fmt.Sprintf("k%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	servers[1].Stop()
	servers[2].Stop()

	cl, err := etcd.New(etcd.Config{Endpoints: []string{survivor.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, _, err := cl.Members(shortCtx(t)); err == nil {
		t.Fatal("the member list answered without a quorum: the test does not lose quorum")
	}
	st, err := cl.Status(t.Context(), survivor.ClientURL)
	if err != nil || st.RaftIndex == 0 {
		t.Fatalf("status of the survivor without quorum: %+v, %v", st, err)
	}
	// It follows no leader once it has heard none for an election timeout: the recovery holds
	// while a member follows one (a quorum leads where the operator does not reach).
	for deadline := time.Now().Add(10 * time.Second); st.LeaderID != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor still follows leader %x 10 s after its peers stopped", st.LeaderID)
		}
		time.Sleep(100 * time.Millisecond)
		if st, err = cl.Status(t.Context(), survivor.ClientURL); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	info, err := cl.Snapshot(t.Context(), survivor.ClientURL, &snap)
	if err != nil || info.SizeBytes == 0 || info.Revision < 51 {
		t.Fatalf("snapshot of the survivor without quorum: %+v, %v", info, err)
	}

	survivor.Stop()
	survivor.ExtraArgs = append(survivor.ExtraArgs, "--force-new-cluster")
	survivor.Start(t, "existing", etcdtest.InitialCluster(servers...))
	survivor.WaitReady(t)
	_, members, err := cl.Members(t.Context())
	if err != nil || len(members) != 1 || members[0].Name != survivor.Name {
		t.Fatalf("members after --force-new-cluster: %+v, %v", members, err)
	}
	resp, err := kv.Get(t.Context(), "k", clientv3.WithPrefix())
	if err != nil || resp.Count != 50 {
		t.Fatalf("keys after --force-new-cluster: %v, %v", resp, err)
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// With authentication on, a client that logs in with a password needs a quorum: etcd issues
// its token through raft, so without one the login times out and nothing is answered. A TLS
// member with --client-cert-auth takes a client certificate's common name as the user instead,
// no login: the operator's certificate, root's, still has the survivor's status answered, its
// raft index among it, to choose the survivor by.
func TestWithoutAQuorumAPasswordLoginFailsAndRootsCertificateIsAnswered(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA("test CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := certs.Issue(ca, certs.Request{Kind: certs.Server, CommonName: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	root, err := certs.Issue(ca, certs.Request{Kind: certs.Client, CommonName: "root", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": ca.CertPEM, "server.crt": server.CertPEM, "server.key": server.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	servers := etcdtest.NewServers(t, 3)
	for _, s := range servers {
		s.ClientURL = strings.Replace(s.ClientURL, "http://", "https://", 1)
		s.ExtraArgs = []string{"--cert-file=" + filepath.Join(dir, "server.crt"), "--key-file=" + filepath.Join(dir, "server.key"),
			"--trusted-ca-file=" + filepath.Join(dir, "ca.crt"), "--client-cert-auth"}
	}
	initial := etcdtest.InitialCluster(servers...)
	for _, s := range servers {
		s.Start(t, "new", initial)
	}
	pair, err := tls.X509KeyPair(root.CertPEM, root.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	withCert := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	admin := waitForClient(t, etcd.Config{Endpoints: etcdtest.ClientURLs(servers), TLS: withCert})
	if err := admin.SetRootPassword(t.Context(), "secret"); err != nil {
		t.Fatal(err)
	}
	if err := admin.EnableAuth(t.Context()); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	survivor := servers[0]
	servers[1].Stop()
	servers[2].Stop()

	if cl, err := etcd.New(etcd.Config{Endpoints: []string{survivor.ClientURL}, TLS: withCert, Username: "root", Password: "secret"}); err == nil {
		_, statusErr := cl.Status(shortCtx(t), survivor.ClientURL)
		cl.Close()
		if statusErr == nil {
			t.Fatal("a password login was answered without a quorum: the operator need not avoid it")
		}
	}
	cl, err := etcd.New(etcd.Config{Endpoints: []string{survivor.ClientURL}, TLS: withCert})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(t.Context(), survivor.ClientURL)
	if err != nil || st.RaftIndex == 0 {
		t.Fatalf("status of the survivor by root's certificate, without a quorum: %+v, %v", st, err)
	}
}

// waitForClient connects with cfg once its members answer a member list.
func waitForClient(t *testing.T, cfg etcd.Config) etcd.Client {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cl, err := etcd.New(cfg)
		if err == nil {
			if _, _, err = cl.Members(shortCtx(t)); err == nil {
				return cl
			}
			cl.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not answer within 20 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
