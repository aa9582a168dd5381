package agent

import "testing"

// What a backup records of authentication is etcd's answer before and after the snapshot
// when they agree, and unknown otherwise: the snapshot holds the state of a moment between.
func TestAuthDuringTheSnapshot(t *testing.T) {
	on, off := true, false
	for _, tc := range []struct {
		name          string
		before, after *bool
		want          string
	}{
		{"on throughout", &on, &on, "true"},
		{"off throughout", &off, &off, "false"},
		{"turned on meanwhile", &off, &on, "unknown"},
		{"no answer before", nil, &on, "unknown"},
		{"no answer after", &off, nil, "unknown"},
	} {
		got := "unknown"
		if a := authDuring(tc.before, tc.after); a != nil {
			got = map[bool]string{true: "true", false: "false"}[*a]
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
