package schedstat

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Threads that want more CPU than there is wait on a run queue, and the wait is counted: four
// busy threads per core for half a second wait for a core three quarters of the time.
func TestBusyThreadsWaitForACPU(t *testing.T) {
	busy := 4 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(busy)) // else Go's own run queue holds them
	before := RunQueueWait("self")
	var wg sync.WaitGroup
	deadline := time.Now().Add(500 * time.Millisecond)
	for range busy {
		wg.Go(func() {
			runtime.LockOSThread()         // a thread each, for the kernel to queue
			defer runtime.UnlockOSThread() // and kept after: an ended thread's wait is not counted
			for time.Now().Before(deadline) {
			}
		})
	}
	wg.Wait()
	if waited := RunQueueWait("self") - before; waited < time.Duration(busy)*time.Second/4 {
		t.Errorf("%d busy threads on %d CPUs for 0.5 s waited %v in all for a CPU", busy, runtime.NumCPU(), waited)
	}
	if RunQueueWait("no-such-process") != 0 {
		t.Error("a process that is not there waited")
	}
}
