// Not build-tagged: the check is pure and its test runs with the unit tests (make test) as well
// as in the suite.

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// managerContainer is the operator's container in its Deployment's pods.
const managerContainer = "manager"

// leaderElectionLost is controller-runtime's error when the Lease's elector stops. The manager
// exits with it (main logs it as "manager stopped") when a renewal did not come through within
// the renew deadline. The suite's tests stop the operator only cleanly (a rollout, a deleted pod,
// a scale to zero) or by a failpoint's crash, never this way: a slow API server must not restart
// the operator.
const leaderElectionLost = "leader election lost"

// afterStopBegan is how controller-runtime reports an error that arrives once the manager is
// already stopping. A clean stop cancels the elector, whose callback then reports
// leaderElectionLost too: that line is the stop's echo, not a loss.
const afterStopBegan = "error received after stop sequence was engaged"

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
			if lostLeaseIn(lines.Bytes()) {
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

// lostLeaseIn tells whether one JSON log line of the manager says it stopped because it lost its
// Lease. A line that is not JSON (a panic's trace) is not such a line.
func lostLeaseIn(line []byte) bool {
	var entry struct {
		Msg   string `json:"msg"`
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &entry) != nil {
		return false
	}
	return strings.Contains(entry.Error, leaderElectionLost) && entry.Msg != afterStopBegan
}
