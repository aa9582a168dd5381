package linearizability

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// History is what a Workload's clients asked and were told, with when (monotonic nanoseconds
// since the workload started).
type History struct {
	completed []porcupine.Operation
	// Puts and deletes that failed or timed out. Their return is unknown: a write the client
	// gave up on can still be applied later, even after every other operation.
	indeterminate []porcupine.Operation
	// Gets that failed are dropped: a read changes nothing, and it returned nothing to check.
	failedGets int
}

// Operations is the history as porcupine checks it: every completed operation, and every
// indeterminate one with its return after the last moment anything else was seen (porcupine's
// intervals are closed, so "after" is one nanosecond later), which lets it take effect anywhere
// after its call, or not at all.
//
// An indeterminate put whose value nobody saw — no get read it, no write replaced it — is left
// out. That changes no verdict: in any linearization it can be removed (whatever came after it
// up to the next write saw its value, and nothing did; the next write, if any, is one whose
// outcome is unknown and so checks nothing), or added at the end. And it keeps the check fast:
// each indeterminate write is concurrent with everything after it, and the checker's search
// grows steeply with their number on a key.
func (h *History) Operations() []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h.completed)+len(h.indeterminate))
	seen := map[string]bool{}
	var end int64
	for _, op := range h.completed {
		ops = append(ops, op)
		seen[op.Output.(output).Value] = true
		end = max(end, op.Return)
	}
	for _, op := range h.indeterminate {
		end = max(end, op.Call)
	}
	for _, op := range h.indeterminate {
		if in := op.Input.(input); in.Kind == opPut && !seen[in.Value] {
			continue
		}
		op.Return = end + 1
		ops = append(ops, op)
	}
	return ops
}

// Counts summarizes the history.
func (h *History) Counts() Counts {
	c := Counts{Indeterminate: len(h.indeterminate), FailedGets: h.failedGets}
	for _, op := range h.completed {
		switch op.Input.(input).Kind {
		case opGet:
			c.Gets++
		case opPut:
			c.Puts++
		default:
			c.Deletes++
		}
	}
	return c
}

func (h *History) append(other *History) {
	h.completed = append(h.completed, other.completed...)
	h.indeterminate = append(h.indeterminate, other.indeterminate...)
	h.failedGets += other.failedGets
}

// Counts are the operations of a history by outcome.
type Counts struct {
	Gets, Puts, Deletes int // completed
	Indeterminate       int // puts and deletes that failed: applied or not, the check allows both
	FailedGets          int // dropped
}

// Operations is the number of operations in the history, failed gets aside.
func (c Counts) Operations() int { return c.Gets + c.Puts + c.Deletes + c.Indeterminate }

func (c Counts) String() string {
	return fmt.Sprintf("%d operations (%d gets, %d puts, %d deletes completed; %d puts/deletes indeterminate), %d failed gets dropped",
		c.Operations(), c.Gets, c.Puts, c.Deletes, c.Indeterminate, c.FailedGets)
}

// recorder is one client's part of a history. Porcupine's visualization draws each ClientId
// as one sequential lane; an indeterminate operation has no end, so the client continues on a
// new lane, as etcd's robustness tests do.
type recorder struct {
	History
	start time.Time
	lanes *atomic.Int64
	lane  int
	// progress counts the workload's completed operations while it runs.
	progress *atomic.Int64
}

func newRecorder(start time.Time, lanes, progress *atomic.Int64) *recorder {
	return &recorder{start: start, lanes: lanes, lane: int(lanes.Add(1) - 1), progress: progress}
}

// now is monotonic: time.Since uses the monotonic clock reading of start.
func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) record(in input, call int64, value string, err error) {
	ret := r.now()
	switch {
	case err == nil:
		r.completed = append(r.completed, porcupine.Operation{ClientId: r.lane, Input: in, Call: call, Output: output{Value: value}, Return: ret})
		r.progress.Add(1)
	case in.Kind == opGet:
		r.failedGets++
	default:
		r.indeterminate = append(r.indeterminate, porcupine.Operation{
			ClientId: r.lane, Input: in, Call: call, Output: output{Indeterminate: true}, Metadata: err.Error(),
		})
		r.lane = int(r.lanes.Add(1) - 1)
	}
}
