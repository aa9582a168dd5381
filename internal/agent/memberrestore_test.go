package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// memberPod is a restored member's pod as its two restore containers see it: the claim's mount,
// the emptyDir the agent leaves its binary in, and the termination message.
type memberPod struct {
	mount, agentDir string
}

func newMemberPod(t *testing.T) memberPod {
	return memberPod{mount: t.TempDir(), agentDir: t.TempDir()}
}

// run runs one of the pod's restore containers with cfg as its configuration.
func (p memberPod) run(t *testing.T, cfg jobspec.JobConfig, run func(context.Context) int) (int, agent.Report) {
	t.Helper()
	return runInPod(t, run, cfg, agent.PodPaths{MemberMount: p.mount, AgentBinary: filepath.Join(p.agentDir, "manager")})
}

// etcdutl is the install container's command: the pod's own etcdutl restoring the staged
// snapshot, with its paths under the test's mount.
func (p memberPod) etcdutl(t *testing.T) []string {
	return []string{
		filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore", filepath.Join(p.mount, "restore", "snapshot.db"),
		"--data-dir=" + filepath.Join(p.mount, "restore", "data"), "--name=m", "--initial-cluster=m=http://127.0.0.1:1",
		"--initial-advertise-peer-urls=http://127.0.0.1:1", "--bump-revision=1000", "--mark-compacted",
	}
}

// A member's pod restores its data in two containers: the fetch stages and records the
// snapshot and leaves the agent's binary, the install runs etcdutl and moves the result into
// place. Made again (as a lost pod is), both leave the installed data as it is, and the fetch
// reports what it recorded, even with the snapshot gone from the bucket. Data with no record
// beside it is never taken for a restore's.
func TestAMemberPodRestoresItsDataOnce(t *testing.T) {
	srv, _, res := backUpCluster(t, 1, 30)
	cfg := fetchFromBucket(t, srv, res, res.SHA256)
	pod := newMemberPod(t)
	install := func(context.Context) int { return agent.RunMemberRestoreInstall(t.Context(), pod.etcdutl(t)) }

	code, fetched := pod.run(t, cfg, agent.RunMemberRestoreFetch)
	if code != 0 || fetched.Restore == nil || fetched.Restore.SHA256 != res.SHA256 || fetched.Restore.Revision != res.Revision {
		t.Fatalf("fetch: exit %d, %+v; want the backup %+v", code, fetched, res)
	}
	if info, err := os.Stat(filepath.Join(pod.agentDir, "manager")); err != nil || info.Mode()&0o100 == 0 {
		t.Fatalf("the agent's binary was not left executable for the install container: %v", err)
	}
	if code, report := pod.run(t, cfg, install); code != 0 || report.Error != "" {
		t.Fatalf("install: exit %d, %+v", code, report)
	}
	db := filepath.Join(pod.mount, "data", "member", "snap", "db")
	installed, err := os.Stat(db)
	if err != nil {
		t.Fatalf("no restored data in place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pod.mount, "restore")); err == nil {
		t.Error("the staging directory was left behind")
	}

	// The pod made again, with the snapshot gone: nothing is fetched or restored again.
	if err := os.Remove(filepath.Join(srv.Root, strings.TrimPrefix(res.URI, "s3://"))); err != nil {
		t.Fatal(err)
	}
	code, again := pod.run(t, cfg, agent.RunMemberRestoreFetch)
	if code != 0 || again.Restore == nil || *again.Restore != *fetched.Restore {
		t.Fatalf("fetch in a pod made again: exit %d, %+v; want the first report %+v again", code, again, fetched.Restore)
	}
	if code, report := pod.run(t, cfg, install); code != 0 || report.Error != "" {
		t.Fatalf("install in a pod made again: exit %d, %+v", code, report)
	}
	if after, err := os.Stat(db); err != nil || !after.ModTime().Equal(installed.ModTime()) {
		t.Errorf("the installed data was touched by a pod made again: %v", err)
	}

	// Data that no restore installed: refused for good.
	if err := os.Remove(filepath.Join(pod.mount, "restored.json")); err != nil {
		t.Fatal(err)
	}
	code, refused := pod.run(t, cfg, agent.RunMemberRestoreFetch)
	if code != jobspec.ExitPermanent || !strings.Contains(refused.Error, "no record of a restore") {
		t.Errorf("fetch over data with no record: exit %d, %+v; want a permanent failure", code, refused)
	}
}

// The fetch of a member's pod fails for good on a snapshot that is not the recorded one, and
// leaves nothing for the install to restore.
func TestAMemberPodRefusesASnapshotThatIsNotTheRecordedOne(t *testing.T) {
	srv, _, res := backUpCluster(t, 1, 10)
	cfg := fetchFromBucket(t, srv, res, strings.Repeat("0", 64))
	pod := newMemberPod(t)
	code, report := pod.run(t, cfg, agent.RunMemberRestoreFetch)
	if code != jobspec.ExitPermanent || !report.Unrestorable || !strings.Contains(report.Error, "not the recorded") {
		t.Fatalf("fetch: exit %d, %+v; want a permanent failure", code, report)
	}
	if _, err := os.Stat(filepath.Join(pod.mount, "restored.json")); err == nil {
		t.Error("a record was written for a snapshot that was refused")
	}
	code, report = pod.run(t, cfg, func(context.Context) int { return agent.RunMemberRestoreInstall(t.Context(), pod.etcdutl(t)) })
	if code == 0 {
		t.Errorf("install with nothing staged succeeded: %+v", report)
	}
	if _, err := os.Stat(filepath.Join(pod.mount, "data")); err == nil {
		t.Error("a data directory was installed from a refused snapshot")
	}
}
