// Package clusterscripts tests the shell scripts of hack/ (the local cluster's, CI's) in pieces that
// touch only a temporary directory: never the machine's network, mounts or processes.
package clusterscripts

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// downScript is hack/cluster/down.sh; sourcing it defines its functions without running main.
var downScript, _ = filepath.Abs("../../hack/cluster/down.sh")

// runDownFunction sources down.sh and runs one of its functions with the cluster's run directory
// in runDir, failing the test with the script's output if it exits non-zero.
func runDownFunction(t *testing.T, runDir, function string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", `source "$1" && "$2"`, "bash", downScript, function)
	cmd.Env = append(os.Environ(), "CLUSTER_RUN_DIR="+runDir, "CLUSTER_DIR="+filepath.Join(runDir, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", function, err, out)
	}
}

// After the machine killed every process of the cluster (a session or CI job ended hard),
// containerd's task state still names each shim's socket, and the socket file is still there
// with nobody listening on it. cluster-down must clean that up, not stop at it: CI's first
// step is cluster-down on whatever the previous run left.
func TestLeftoverTasksWhoseShimIsGoneAreCleanedUp(t *testing.T) {
	runDir := t.TempDir()
	task := filepath.Join(runDir, "containerd", "io.containerd.runtime.v2.task", "k8s.io", "0123abcd")
	if err := os.MkdirAll(task, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(runDir, "shim.sock")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	listener.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := listener.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(task, "address"), []byte("unix://"+socket), 0o644); err != nil {
		t.Fatal(err)
	}
	// The container's init process is long gone too; PID 0 never names a process.
	if err := os.WriteFile(filepath.Join(task, "init.pid"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}

	runDownFunction(t, runDir, "kill_leftover_tasks")

	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the dead shim's socket %s is still there (stat: %v)", socket, err)
	}
}
