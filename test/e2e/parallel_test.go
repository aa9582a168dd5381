//go:build e2e

package e2e

// The suite's own limit on the tests that run beside each other, and their order: the longest
// expected first. go test's -parallel lets the paused tests go in an order the runtime picks, and
// a test of ten minutes that starts last leaves the suite's end waiting on it alone: with the
// day-two matrix's cells in a phase of their own and the other parallel tests in another, the
// suite spent ~12 min on each (CI, 2026-11-29); packed longest first, the two take about as long
// as their work divided by the slots. The Makefile sets -parallel high so that every parallel
// test reaches this queue, and E2E_PARALLEL to the number that run at once.

import (
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// defaultParallel: with 5 at once (tried 2026-11-26) the two cores were overloaded: the API
// server answered a Get past its 30-second deadline, a claim's volume took 90 s, and three tests
// failed on timeouts in one CI run. The tests spend most of their time waiting
// (quorumLossRecovery.after, schedules, certificate lifetimes), not on CPU.
const defaultParallel = 4

// gatherFor: how long the first test to ask waits before any is let through, so that all the
// tests released together by go test are in the queue and the longest of them goes first.
const gatherFor = 2 * time.Second

var slots = &slotQueue{}

// slotQueue lets at most limit tests run at once, the waiting one expected to take longest first
// (the earliest to ask among equals).
type slotQueue struct {
	mu       sync.Mutex
	running  int
	limit    int
	gathered chan struct{}
	waiting  []*slotWaiter
	asked    int
}

type slotWaiter struct {
	expected time.Duration
	order    int
	admitted chan struct{}
}

// inParallel is t.Parallel for this suite: the test pauses until go test lets the parallel tests
// go, then waits for one of the E2E_PARALLEL slots, given to the waiting test with the longest
// expected duration first. expected is what the test took in CI (its order is what matters).
// A test whose subtests are parallel calls t.Parallel, not this: it holds no slot while they run.
func inParallel(t *testing.T, expected time.Duration) {
	t.Helper()
	t.Parallel()
	began := time.Now()
	slots.acquire(expected)
	t.Cleanup(slots.release)
	if waited := time.Since(began); waited > gatherFor+time.Second {
		t.Logf("waited %v for a slot beside the tests expected to take longer (this test: about %v)", waited.Round(time.Second), expected)
	}
}

func (q *slotQueue) acquire(expected time.Duration) {
	q.mu.Lock()
	if q.limit == 0 {
		q.limit = defaultParallel
		if n, err := strconv.Atoi(os.Getenv("E2E_PARALLEL")); err == nil && n > 0 {
			q.limit = n
		}
		q.gathered = make(chan struct{})
		time.AfterFunc(gatherFor, func() { close(q.gathered) })
	}
	w := &slotWaiter{expected: expected, order: q.asked, admitted: make(chan struct{})}
	q.asked++
	q.waiting = append(q.waiting, w)
	gathered := q.gathered
	q.mu.Unlock()

	<-gathered
	q.mu.Lock()
	q.letThrough()
	q.mu.Unlock()
	<-w.admitted
}

func (q *slotQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	q.letThrough()
}

// letThrough gives the free slots to the waiting tests expected to take longest. Called with mu.
func (q *slotQueue) letThrough() {
	for q.running < q.limit && len(q.waiting) > 0 {
		next := 0
		for i, w := range q.waiting {
			if w.expected > q.waiting[next].expected ||
				(w.expected == q.waiting[next].expected && w.order < q.waiting[next].order) {
				next = i
			}
		}
		w := q.waiting[next]
		q.waiting = append(q.waiting[:next], q.waiting[next+1:]...)
		q.running++
		close(w.admitted)
	}
}

// The queue itself, without a cluster: with one slot, the tests waiting when it frees go longest
// first, and the earliest to ask among equals.
func TestSlotQueueLetsTheLongestGoFirst(t *testing.T) {
	q := &slotQueue{limit: 1, gathered: make(chan struct{})}
	close(q.gathered)
	q.acquire(time.Second) // holds the one slot while the others ask
	var mu sync.Mutex
	var order []time.Duration
	var done sync.WaitGroup
	for i, expected := range []time.Duration{2 * time.Second, 5 * time.Second, 3 * time.Second} {
		done.Add(1)
		go func() {
			defer done.Done()
			q.acquire(expected)
			mu.Lock()
			order = append(order, expected)
			mu.Unlock()
			q.release()
		}()
		for queued := 0; queued != i+1; time.Sleep(time.Millisecond) {
			q.mu.Lock()
			queued = len(q.waiting)
			q.mu.Unlock()
		}
	}
	q.release()
	done.Wait()
	if want := []time.Duration{5 * time.Second, 3 * time.Second, 2 * time.Second}; !slices.Equal(order, want) {
		t.Fatalf("let through in the order %v, want %v", order, want)
	}
}
