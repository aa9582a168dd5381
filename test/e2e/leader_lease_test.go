//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// leaderElectionLost is what the manager says when it exits because it could not renew its
// Lease within the renew deadline (controller-runtime's error, logged by main as "manager
// stopped"). The suite's tests stop the operator only cleanly (a rollout, a scale to zero: the
// Lease is handed over) or by a failpoint's crash, never this way: a slow API server must not
// restart the operator.
const leaderElectionLost = "leader election lost"

// operatorKeptItsLease reads the operator's logs the collector followed through the suite and
// names every manager container that stopped leading because a renewal did not come through in
// time, with the line that says so.
func operatorKeptItsLease(logs map[string][]byte) error {
	var lost []string
	for _, key := range slices.Sorted(maps.Keys(logs)) {
		if !strings.Contains(key, "/"+managerContainer+"#") {
			continue
		}
		lines := bufio.NewScanner(bytes.NewReader(logs[key]))
		lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for lines.Scan() {
			if strings.Contains(lines.Text(), leaderElectionLost) {
				lost = append(lost, key+": "+lines.Text())
			}
		}
	}
	if len(lost) > 0 {
		return fmt.Errorf("the operator lost its Lease %d times (it could not renew it within the renew deadline and restarted):\n%s",
			len(lost), strings.Join(lost, "\n"))
	}
	return nil
}
