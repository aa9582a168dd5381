// Package schedstat reads how long a process's threads have waited for a CPU, from the
// kernel's per-thread scheduler statistics: the benchmarks set it beside the reconciles'
// durations, whose tail on a loaded machine follows that wait.
package schedstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RunQueueWait is how long the threads of process pid ("self" for this one) have waited on a
// run queue, ready to run, since each started: the second field of each thread's
// /proc/<pid>/task/<tid>/schedstat. Threads that have ended no longer count, nor does a
// process that has.
func RunQueueWait(pid string) time.Duration {
	files, _ := filepath.Glob(filepath.Join("/proc", pid, "task", "*", "schedstat"))
	var total int64
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			continue // the thread ended since the glob
		}
		if fields := strings.Fields(string(data)); len(fields) > 1 {
			ns, _ := strconv.ParseInt(fields[1], 10, 64)
			total += ns
		}
	}
	return time.Duration(total)
}
