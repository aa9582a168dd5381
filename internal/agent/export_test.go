package agent

import (
	"testing"
	"time"
)

// IsPermanent tells the tests whether the agent would exit ExitPermanent on err.
var IsPermanent = isPermanent

// OpenStorage opens a storage location as a Job does.
var OpenStorage = openStorage

// PodPaths are the paths of a Job's pod the agent uses, as a test points them.
type PodPaths struct{ Claim, VerifyScratch, TerminationMessage, MemberMount, AgentBinary, EncryptionKeys string }

// UsePodPaths points the agent's paths into the test's directories until it ends.
func UsePodPaths(t *testing.T, paths PodPaths) {
	saved := podPaths
	t.Cleanup(func() { podPaths = saved })
	podPaths.claim, podPaths.verifyScratch, podPaths.terminationMessage = paths.Claim, paths.VerifyScratch, paths.TerminationMessage
	podPaths.memberMount, podPaths.agentBinary = paths.MemberMount, paths.AgentBinary
	if paths.EncryptionKeys != "" {
		podPaths.encryptionKeys = paths.EncryptionKeys
	}
}

// UseFreeBytes makes the agent see free bytes on every volume until the test ends.
func UseFreeBytes(t *testing.T, free int64) {
	saved := freeBytes
	t.Cleanup(func() { freeBytes = saved })
	freeBytes = func(string) (int64, error) { return free, nil }
}

// UseHousekeepingInterval makes the archiver list and prune the series every d until the test
// ends.
func UseHousekeepingInterval(t *testing.T, d time.Duration) {
	saved := housekeepingInterval
	t.Cleanup(func() { housekeepingInterval = saved })
	housekeepingInterval = d
}
