package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// A verify Job proves a stored snapshot restorable, in a scratch directory of its own pod: fetch
// (this agent) downloads it, checking its sha256; the target etcd image's etcdutl restores it,
// checking the snapshot's own hash; that etcd serves the restored data alone, on localhost;
// verify (this agent) compares what it serves with what the backup recorded.

// VerifyConfig is one verification of a restored snapshot.
type VerifyConfig struct {
	// Etcd reaches the member serving the restored snapshot.
	Etcd etcd.Config
	// Revision is the snapshot's recorded revision; Keyspace what the member it was taken from
	// held (nil: nothing was recorded, and only the revision is checked).
	Revision int64
	Keyspace *etcdv1alpha1.SnapshotKeyspace
	// Ready bounds the wait for the restored member to answer.
	Ready time.Duration
}

// VerifyResult is what the restored snapshot showed.
type VerifyResult struct {
	// Revision and KeyCount of the restored keyspace, the key count at the recorded revision.
	Revision int64 `json:"revision"`
	KeyCount int64 `json:"keyCount,omitempty"`
	// HashCompared: the restored keyspace's HashKV was held to the recorded one; it is not when
	// nothing was recorded or the two were compacted at different revisions.
	HashCompared bool `json:"hashCompared,omitempty"`
	// Mismatch says how the restored snapshot differs from its record; empty, it does not.
	Mismatch string `json:"mismatch,omitempty"`
	// AnsweredAt is when the restored member first answered a linearizable read, on the
	// node's clock: where the snapshot's recovery time, begun by the fetch, ends.
	AnsweredAt time.Time `json:"answeredAt,omitzero"`
}

// VerifyRestored compares the keyspace the restored member serves with the snapshot's record.
// A difference is a result with a Mismatch, not an error: errors are for a check that could not
// be made. A member that refuses the verifier's user refuses it for good: that error is
// permanent, and says the verifier, not the snapshot, was refused.
func VerifyRestored(ctx context.Context, cfg VerifyConfig) (VerifyResult, error) {
	result, err := verifyRestored(ctx, cfg)
	if etcd.RefusedTheUser(err) {
		return result, permanentError{fmt.Errorf("the restored member refused the verifier: %w", err)}
	}
	return result, err
}

func verifyRestored(ctx context.Context, cfg VerifyConfig) (VerifyResult, error) {
	url := cfg.Etcd.Endpoints[0]
	deadline := time.Now().Add(cfg.Ready)
	if err := waitListening(ctx, url, deadline); err != nil {
		return VerifyResult{}, err
	}
	cl, err := etcd.New(cfg.Etcd)
	if err != nil {
		return VerifyResult{}, err
	}
	defer cl.Close()
	st, answeredAt, err := waitAnswering(ctx, cl, url, deadline)
	if err != nil {
		return VerifyResult{}, err
	}
	result := VerifyResult{Revision: st.Revision, AnsweredAt: answeredAt}
	if st.Revision < cfg.Revision {
		result.Mismatch = fmt.Sprintf("the restored keyspace is at revision %d, below the recorded %d", st.Revision, cfg.Revision)
		return result, nil
	}
	want := cfg.Keyspace
	if want == nil {
		return result, nil
	}
	got, err := cl.KeyspaceAt(ctx, url, want.Revision)
	if errors.Is(err, etcd.ErrCompacted) {
		// Compacted past the recorded revision between the record and the snapshot: the
		// snapshot is newer than the record, which can no longer describe it.
		return result, nil
	}
	if err != nil {
		return VerifyResult{}, err
	}
	result.KeyCount = got.Keys
	if got.Keys != want.KeyCount {
		result.Mismatch = fmt.Sprintf("the restored keyspace holds %d keys at revision %d, the recorded %d", got.Keys, want.Revision, want.KeyCount)
		return result, nil
	}
	// A compaction between the record and the snapshot changes the hash of the same data:
	// the hashes are comparable only for the same compact revision.
	if got.CompactRevision != want.CompactRevision {
		return result, nil
	}
	result.HashCompared = true
	if int64(got.Hash) != want.HashKV {
		result.Mismatch = fmt.Sprintf("the restored keyspace hashes to %d at revision %d, not the recorded %d", got.Hash, want.Revision, want.HashKV)
	}
	return result, nil
}

// answerPoll is how often the restored member is asked whether it answers: the recovery time
// is measured to it.
const answerPoll = 100 * time.Millisecond

// waitListening waits, until deadline, for the member at url to accept connections. Only then
// is the client made: gRPC, refused by a member not yet listening, would try again only after
// a backoff of seconds, and the recovery time would count that backoff.
func waitListening(ctx context.Context, url string, deadline time.Time) error {
	u, err := neturl.Parse(url)
	if err != nil {
		return permanentError{fmt.Errorf("the restored member's URL %q: %w", url, err)}
	}
	var dialer net.Dialer
	for {
		conn, err := dialer.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the restored member at %s did not listen by %s: %w", url, deadline.Format(time.RFC3339), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(answerPoll):
		}
	}
}

// waitAnswering waits, until deadline, for the member at url to report its status and answer
// a linearizable read, and says when it first did: the restored member starts next to the
// verify container and may not answer yet.
func waitAnswering(ctx context.Context, cl etcd.Client, url string, deadline time.Time) (etcd.MemberStatus, time.Time, error) {
	for {
		st, err := cl.Status(ctx, url)
		if err == nil && len(st.Errors) > 0 {
			err = errors.New(st.Errors[0])
		}
		if err == nil {
			if err = cl.LinearizableRead(ctx); err == nil {
				return st, time.Now(), nil
			}
		}
		if etcd.RefusedTheUser(err) {
			return etcd.MemberStatus{}, time.Time{}, err
		}
		if time.Now().After(deadline) {
			return etcd.MemberStatus{}, time.Time{}, fmt.Errorf("the restored member at %s did not answer by %s: %w", url, deadline.Format(time.RFC3339), err)
		}
		select {
		case <-ctx.Done():
			return etcd.MemberStatus{}, time.Time{}, ctx.Err()
		case <-time.After(answerPoll):
		}
	}
}
