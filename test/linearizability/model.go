// Package linearizability records what concurrent clients saw of an etcd cluster — puts, gets
// and deletes on a few keys — and checks with porcupine that the history is linearizable: that
// there is one order of all operations, each taking effect at an instant between its call and
// its return, in which every result is what a single sequential key-value store would have
// returned. The e2e suite runs a Workload while the operator scales, replaces, upgrades and loses
// members; a stale read, a lost acknowledged write or a write applied twice fails the check.
package linearizability

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

type opKind uint8

const (
	opGet opKind = iota
	opPut
	opDelete
)

// input is what a client asked. Every put writes a value no other put writes, so a value read
// names the one put it came from.
type input struct {
	Kind  opKind
	Key   string
	Value string
}

// output is what the client was told: for a get, the value read; for a put or delete, the
// value it replaced (both asked with WithPrevKV, so writes observe the state too). "" is an
// absent key: no put writes "". Indeterminate marks a put or delete whose outcome is unknown.
type output struct {
	Value         string
	Indeterminate bool
}

// model is a single key's value: the history is partitioned by key, and a history is
// linearizable exactly when each key's is (operations touch one key each).
//
// An indeterminate write — one that failed or timed out, and may or may not have been applied,
// or may be applied later still — is recorded with its return at the end of the history (see
// History.Operations), so it may be placed anywhere after its call. Placing it after every
// other operation is the same as it never having taken effect; placing it earlier, that it did.
// So the model can apply it like any write and only skips checking the value it replaced,
// which nobody saw. It is never dropped: a later read of its value is explained by it.
var model = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return "" },
	Step: func(state, in, out any) (bool, any) {
		value, i, o := state.(string), in.(input), out.(output)
		switch i.Kind {
		case opGet:
			return o.Value == value, value
		case opPut:
			return o.Indeterminate || o.Value == value, i.Value
		default:
			return o.Indeterminate || o.Value == value, ""
		}
	},
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(state.(string)))
		return h.Sum64()
	},
	DescribeOperation: describeOperation,
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "absent"
		}
		return state.(string)
	},
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		key := op.Input.(input).Key
		byKey[key] = append(byKey[key], op)
	}
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	partitions := make([][]porcupine.Operation, 0, len(keys))
	for _, key := range keys {
		partitions = append(partitions, byKey[key])
	}
	return partitions
}

func describeOperation(in, out any) string {
	i, o := in.(input), out.(output)
	var call string
	switch i.Kind {
	case opGet:
		call = fmt.Sprintf("get(%s)", i.Key)
	case opPut:
		call = fmt.Sprintf("put(%s, %s)", i.Key, i.Value)
	default:
		call = fmt.Sprintf("delete(%s)", i.Key)
	}
	switch {
	case o.Indeterminate:
		return call + " -> failed, may or may not have taken effect"
	case i.Kind == opGet:
		return call + " -> " + describeValue(o.Value)
	default:
		return call + " -> replaced " + describeValue(o.Value)
	}
}

func describeValue(v string) string {
	if v == "" {
		return "absent"
	}
	return v
}
