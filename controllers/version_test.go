package controllers

import (
	"testing"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b      string
		minorOnly bool
		cmp       int
		known     bool
	}{
		{"3.5.9", "3.6.0", false, -1, true},
		{"3.6.16", "3.6.2", false, 1, true},
		{"v3.6.16", "3.6.16", false, 0, true},
		{"3.6.16", "3.6.2", true, 0, true},
		{"3.5.21", "3.6.0", true, -1, true},
		{"4.0.0", "3.7.3", true, 1, true},
		{"garbage", "3.6.0", false, 1, false},
		{"3.6.0", "", false, -1, false},
		{"", "garbage", true, 0, false},
	} {
		if cmp, known := compareVersions(tc.a, tc.b, tc.minorOnly); cmp != tc.cmp || known != tc.known {
			t.Errorf("compareVersions(%q, %q, minorOnly %t) = %d, %t; want %d, %t", tc.a, tc.b, tc.minorOnly, cmp, known, tc.cmp, tc.known)
		}
	}
}

// A restore is refused only for a target of an older minor version than a snapshot's known one.
func TestTooOld(t *testing.T) {
	for _, tc := range []struct {
		target, snapshot string
		want             bool
	}{
		{"3.5.21", "3.6.0", true},
		{"3.6.0", "3.6.16", false},
		{"3.7.3", "3.6.16", false},
		{"3.5.21", "", false},
		{"", "3.6.0", false},
	} {
		if got := tooOld(tc.target, tc.snapshot); got != tc.want {
			t.Errorf("tooOld(%q, %q) = %t, want %t", tc.target, tc.snapshot, got, tc.want)
		}
	}
}

// The version a cluster runs is its oldest member's; one the operator cannot read is never it.
func TestLowestVersion(t *testing.T) {
	members := []etcdv1alpha1.MemberStatus{{Version: "3.6.16"}, {Version: ""}, {Version: "garbage"}, {Version: "3.6.2"}, {Version: "3.7.3"}}
	if got := lowestVersion(members); got != "3.6.2" {
		t.Fatalf("lowestVersion = %q, want 3.6.2", got)
	}
	if got := lowestVersion([]etcdv1alpha1.MemberStatus{{Version: "garbage"}}); got != "garbage" {
		t.Fatalf("lowestVersion of one unreadable version = %q, want it", got)
	}
}
