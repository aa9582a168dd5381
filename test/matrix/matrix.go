// Package matrix is the table the day-two matrix of the e2e suite is generated from: the
// options a cluster is configured with, each with its values, and the operations a user runs
// on a cluster. A new option or operation is a row here; test/e2e's matrix test realizes each
// value and runs each operation, and nothing else changes.
//
// Cells are generated, not written: CI runs a set of clusters chosen so that every operation
// runs on every value of every option at least once (Covering); the named target runs every
// pair of option values at least once, each cluster running every operation that applies to
// it (AllPairs), or the full product of the options (Full).
package matrix

import (
	"fmt"
	"slices"
	"strings"
)

// Option is one way clusters differ, with the values the matrix tries. The first value is the
// plainest: the one a cluster has when nothing is said.
type Option struct {
	Name   string
	Values []string
	// Why says what a user relies on that this option changes.
	Why string
}

// The options and their values.
const (
	TLS        = "tls"
	Auth       = "auth"
	Version    = "version"
	Size       = "size"
	Placement  = "placement"
	Namespace  = "namespace"
	Repository = "repository"
	Nodes      = "nodes"
)

// Options are the configurations the matrix covers.
var Options = []Option{
	{TLS, []string{"none", "operator", "secrets"}, "every connection the operator and its Jobs make, and the certificates they present"},
	{Auth, []string{"none", "root"}, "every call the operator, its Jobs and a restored snapshot's member accept"},
	{Version, []string{"3.6", "3.7"}, "etcd's flags and behaviour; the upgrade from one minor version to the next"},
	{Size, []string{"1", "3", "5"}, "quorum, and which operations need one"},
	{Placement, []string{"default", "template"}, "where members and the Jobs that read or fill their claims may run: a pod template with a nodeSelector and tolerations"},
	{Namespace, []string{"plain", "quota"}, "a ResourceQuota that demands requests and limits of every container"},
	{Repository, []string{"default", "private"}, "a private etcd repository: every pod running the etcd image needs the pull secrets"},
	{Nodes, []string{"one", "two"}, "node-local volumes on two nodes: the Jobs reading a claim run on its node"},
}

// Config is one value for every option.
type Config map[string]string

// String names the config by its values, in the options' order.
func (c Config) String() string {
	parts := make([]string, 0, len(Options))
	for _, o := range Options {
		parts = append(parts, o.Name+"="+c[o.Name])
	}
	return strings.Join(parts, ",")
}

// Operation is a day-two operation. The operations run in the order of Operations on one
// cluster, the destructive ones last.
type Operation struct {
	Name string
	// NotFor says why the operation does not apply to a config, or "" if it does.
	NotFor func(Config) string
	// Needs are the operations it builds on (a restore on a backup), run before it.
	Needs []string
}

// The operations.
const (
	BackupToS3         = "back up to S3"
	BackupToClaim      = "back up to a claim, verified"
	ScaleUpAndDown     = "scale up and back"
	Defragment         = "defragment"
	RotatePassword     = "rotate the root password"
	UpgradeMinor       = "upgrade a minor version"
	ReplaceLostMember  = "replace a lost member"
	RestoreNew         = "restore into a new cluster"
	RestorePointInTime = "restore a point in time into a new cluster"
	RestoreInPlace     = "restore in place"
	RecoverByHand      = "recover a lost quorum by annotation"
	RecoverByPolicy    = "recover a lost quorum by policy ForceNewCluster"
	RecoverFromBackups = "restore a lost cluster from its latest backup"
)

// Operations are what the matrix runs on each cluster, in this order.
var Operations = []Operation{
	{Name: BackupToS3},
	{Name: BackupToClaim},
	{Name: ScaleUpAndDown},
	{Name: Defragment},
	{Name: RotatePassword, NotFor: func(c Config) string { return unless(c[Auth] == "root", "no root authentication") }},
	{Name: UpgradeMinor, NotFor: func(c Config) string { return unless(c[Version] == "3.6", "already on the newest minor version") }},
	{Name: ReplaceLostMember, NotFor: needsQuorumWithoutOne},
	{Name: RestoreNew, Needs: []string{BackupToS3}},
	{Name: RestorePointInTime},
	{Name: RestoreInPlace, Needs: []string{BackupToS3}},
	{Name: RecoverByHand, NotFor: needsQuorumWithoutOne},
	{Name: RecoverByPolicy, NotFor: needsQuorumWithoutOne},
	{Name: RecoverFromBackups, Needs: []string{BackupToClaim}},
}

// needsQuorumWithoutOne: losing a member, or all but one, needs members to lose.
func needsQuorumWithoutOne(c Config) string {
	return unless(c[Size] != "1", "a cluster of one member has no other member to lose")
}

func unless(ok bool, why string) string {
	if ok {
		return ""
	}
	return why
}

// Operation by name; it panics on a name the table does not have.
func OperationNamed(name string) Operation {
	i := slices.IndexFunc(Operations, func(o Operation) bool { return o.Name == name })
	if i < 0 {
		panic("matrix: no operation " + name)
	}
	return Operations[i]
}

// Applies says whether op applies to c.
func (op Operation) Applies(c Config) bool { return op.NotFor == nil || op.NotFor(c) == "" }

// Cell is one cluster of the matrix: its config, and the operations run on it, in order.
type Cell struct {
	Config     Config
	Operations []string
}

// Name is the cell's name in test output.
func (c Cell) Name() string { return c.Config.String() }

// Values restricts the options to the values an environment can realize (the second node
// only where the local cluster has one); an option not named keeps all its values.
type Values map[string][]string

// options are the options with their values as vals restricts them.
func options(vals Values) []Option {
	out := make([]Option, 0, len(Options))
	for _, o := range Options {
		if v, ok := vals[o.Name]; ok {
			o.Values = slices.DeleteFunc(slices.Clone(o.Values), func(x string) bool { return !slices.Contains(v, x) })
		}
		out = append(out, o)
	}
	return out
}

// Full is every config of the options' product, each running every operation that applies.
func Full(vals Values) []Cell {
	var cells []Cell
	for _, c := range product(options(vals)) {
		cells = append(cells, Cell{Config: c, Operations: applicable(c)})
	}
	return cells
}

// product is every config of the options.
func product(opts []Option) []Config {
	configs := []Config{{}}
	for _, o := range opts {
		var next []Config
		for _, c := range configs {
			for _, v := range o.Values {
				n := Config{}
				for k, x := range c {
					n[k] = x
				}
				n[o.Name] = v
				next = append(next, n)
			}
		}
		configs = next
	}
	return configs
}

// applicable are the operations that apply to c, in order.
func applicable(c Config) []string {
	var out []string
	for _, op := range Operations {
		if op.Applies(c) {
			out = append(out, op.Name)
		}
	}
	return out
}

// triple is one operation on one value of one option.
type triple struct{ op, option, value string }

// Covering is a small set of cells in which every operation runs on every value of every
// option at least once, where the operation applies to a config with that value. It is the
// greedy set cover over the product: each cell is the config that covers the most pairs still
// uncovered (the first in the product's order on a tie, so the set is the same every run), and
// runs only the operations that cover something new, with the operations they need.
func Covering(vals Values) []Cell {
	opts := options(vals)
	configs := product(opts)
	want := map[triple]bool{}
	for _, c := range configs {
		for _, op := range applicable(c) {
			for _, o := range opts {
				want[triple{op, o.Name, c[o.Name]}] = true
			}
		}
	}
	var cells []Cell
	for len(want) > 0 {
		best, bestGain := Config(nil), 0
		for _, c := range configs {
			if gain := len(covered(c, opts, want)); gain > bestGain {
				best, bestGain = c, gain
			}
		}
		if best == nil {
			panic(fmt.Sprintf("matrix: %d pairs no config covers", len(want))) // cannot be: each comes from a config
		}
		var ops []string
		for _, t := range covered(best, opts, want) {
			ops = append(ops, t.op)
			delete(want, t)
		}
		cells = append(cells, Cell{Config: best, Operations: withNeeds(ops)})
	}
	return cells
}

// covered are the triples of want that config c covers.
func covered(c Config, opts []Option, want map[triple]bool) []triple {
	var out []triple
	for _, op := range applicable(c) {
		for _, o := range opts {
			if t := (triple{op, o.Name, c[o.Name]}); want[t] {
				out = append(out, t)
			}
		}
	}
	return out
}

// withNeeds are ops with the operations they need, in the table's order, each once.
func withNeeds(ops []string) []string {
	need := map[string]bool{}
	var add func(string)
	add = func(name string) {
		if need[name] {
			return
		}
		need[name] = true
		for _, n := range OperationNamed(name).Needs {
			add(n)
		}
	}
	for _, op := range ops {
		add(op)
	}
	var out []string
	for _, op := range Operations {
		if need[op.Name] {
			out = append(out, op.Name)
		}
	}
	return out
}

// AllPairs is a set of cells in which every pair of values of two options occurs at least
// once, each running every operation that applies to it: the greedy pairwise cover of the
// options, operations included through Covering's pairs.
func AllPairs(vals Values) []Cell {
	opts := options(vals)
	configs := product(opts)
	type pair struct{ a, av, b, bv string }
	want := map[pair]bool{}
	pairsOf := func(c Config) []pair {
		var out []pair
		for i, a := range opts {
			for _, b := range opts[i+1:] {
				out = append(out, pair{a.Name, c[a.Name], b.Name, c[b.Name]})
			}
		}
		return out
	}
	for _, c := range configs {
		for _, p := range pairsOf(c) {
			want[p] = true
		}
	}
	var cells []Cell
	for len(want) > 0 {
		best, bestGain := Config(nil), 0
		for _, c := range configs {
			gain := 0
			for _, p := range pairsOf(c) {
				if want[p] {
					gain++
				}
			}
			if gain > bestGain {
				best, bestGain = c, gain
			}
		}
		for _, p := range pairsOf(best) {
			delete(want, p)
		}
		cells = append(cells, Cell{Config: best, Operations: applicable(best)})
	}
	// Every operation on every value, too: add Covering's cells for what the pairs missed.
	for _, extra := range Covering(vals) {
		if !coveredBy(cells, extra) {
			cells = append(cells, extra)
		}
	}
	return cells
}

// coveredBy: every operation of extra runs, in cells, on a config with each of extra's values.
func coveredBy(cells []Cell, extra Cell) bool {
	for _, op := range extra.Operations {
		for name, v := range extra.Config {
			if !slices.ContainsFunc(cells, func(c Cell) bool { return c.Config[name] == v && slices.Contains(c.Operations, op) }) {
				return false
			}
		}
	}
	return true
}
