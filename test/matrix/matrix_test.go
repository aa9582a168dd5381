package matrix

import (
	"reflect"
	"slices"
	"testing"
)

// ci are the values the local cluster of CI can realize: one node.
var ci = Values{Nodes: {"one"}}

// Every operation runs on every value of every option, wherever it applies to a config with
// that value, and each cell's operations apply to it, with what they need before them.
func TestCoveringRunsEveryOperationOnEveryValue(t *testing.T) {
	for _, vals := range []Values{ci, nil} {
		cells := Covering(vals)
		for _, o := range options(vals) {
			for _, v := range o.Values {
				for _, op := range Operations {
					appliesSomewhere := slices.ContainsFunc(product(options(vals)), func(c Config) bool { return c[o.Name] == v && op.Applies(c) })
					ran := slices.ContainsFunc(cells, func(c Cell) bool { return c.Config[o.Name] == v && slices.Contains(c.Operations, op.Name) })
					if appliesSomewhere && !ran {
						t.Errorf("%v: %q never runs with %s=%s", vals, op.Name, o.Name, v)
					}
				}
			}
		}
		checkCells(t, cells)
		t.Logf("values %v: %d cells", vals, len(cells))
		for _, c := range cells {
			t.Logf("  %s: %v", c.Name(), c.Operations)
		}
	}
}

// Every pair of values of two options meets in some cell.
func TestAllPairsMeetsEveryPairOfValues(t *testing.T) {
	cells := AllPairs(ci)
	opts := options(ci)
	for i, a := range opts {
		for _, b := range opts[i+1:] {
			for _, av := range a.Values {
				for _, bv := range b.Values {
					if !slices.ContainsFunc(cells, func(c Cell) bool { return c.Config[a.Name] == av && c.Config[b.Name] == bv }) {
						t.Errorf("%s=%s never meets %s=%s", a.Name, av, b.Name, bv)
					}
				}
			}
		}
	}
	checkCells(t, cells)
	t.Logf("%d cells for every pair, against %d in the full product", len(cells), len(Full(ci)))
}

// The cells are the same on every run: CI's set changes only with the table.
func TestCellsAreTheSameEveryRun(t *testing.T) {
	if !reflect.DeepEqual(Covering(ci), Covering(ci)) || !reflect.DeepEqual(AllPairs(ci), AllPairs(ci)) {
		t.Fatal("two generations of the matrix differ")
	}
}

// checkCells: each cell's operations apply to its config, in the table's order, each after
// the operations it needs.
func checkCells(t *testing.T, cells []Cell) {
	t.Helper()
	for _, c := range cells {
		for i, name := range c.Operations {
			op := OperationNamed(name)
			if !op.Applies(c.Config) {
				t.Errorf("%s runs %q, which does not apply: %s", c.Name(), name, op.NotFor(c.Config))
			}
			for _, need := range op.Needs {
				if !slices.Contains(c.Operations[:i], need) {
					t.Errorf("%s runs %q without %q before it", c.Name(), name, need)
				}
			}
		}
		if !slices.IsSortedFunc(c.Operations, func(a, b string) int { return index(a) - index(b) }) {
			t.Errorf("%s runs %v out of the table's order", c.Name(), c.Operations)
		}
	}
}

func index(name string) int {
	return slices.IndexFunc(Operations, func(o Operation) bool { return o.Name == name })
}
