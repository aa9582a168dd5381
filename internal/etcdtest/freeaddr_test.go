package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Test packages run as parallel processes, and each starts etcd servers on ports from one
// range. A port handed out must not be handed out again, in this process or another, until
// the test that holds it ends: CI once failed with "bind: address already in use" when two
// packages drew the same port.
func TestFreeAddrNeverHandsOutAHeldPortTwice(t *testing.T) {
	const draws = 500 // by chance alone about ten repeats are expected among 500 of 12000 ports
	seen := map[string]bool{}
	for range draws {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice while still held", addr)
		}
		seen[addr] = true
	}

	// Another process, as another test package is, holds its own draws.
	helper := exec.Command(os.Args[0], "-test.run=^TestFreeAddrHelperProcess$")
	helper.Env = append(os.Environ(), "ETCDTEST_FREEADDR_HELPER=1")
	out, err := helper.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if addr, ok := strings.CutPrefix(line, "addr "); ok && seen[addr] {
			t.Fatalf("%s handed out to another process while this one holds it", addr)
		}
	}
}

// TestFreeAddrHelperProcess is run by the test above as a second process.
func TestFreeAddrHelperProcess(t *testing.T) {
	if os.Getenv("ETCDTEST_FREEADDR_HELPER") == "" {
		t.Skip("runs only as the helper process of TestFreeAddrNeverHandsOutAHeldPortTwice")
	}
	for range 500 {
		fmt.Printf("addr %s\n", FreeAddr(t))
	}
}
