package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// A snapshot arrives in messages of etcd's 32 KiB chunks and a few bytes more, which gRPC's
// default buffer pool (tiers of 256 B, 4, 16 and 32 KiB, then 1 MiB) takes from its 1 MiB
// tier, zeroed: 1 MiB cleared for every 32 KiB received, 20 % of a backup's CPU. A 64 KiB tier
// holds them. gRPC takes the pool of its message codec only from this process-wide default,
// set before any connection: every connection of the binary has it, the operator's too.
func init() {
	pool, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 16, 20)
	if err != nil {
		panic(err)
	}
	experimental.SetDefaultBufferPool(pool)
}

// SnapshotInfo describes a snapshot streamed by Snapshot.
type SnapshotInfo struct {
	// Revision of the member's keyspace just before the snapshot was opened: the snapshot
	// holds every write up to it (and any that landed in between).
	Revision int64
	// EtcdVersion is the member's server version; StorageVersion the snapshot's format, which
	// etcd leaves empty until the cluster version is settled, shortly after start.
	EtcdVersion    string
	StorageVersion string
	MemberID       uint64
	ClusterID      uint64
	SizeBytes      int64
}

// Snapshot streams a point-in-time snapshot from the member serving clientURL into w, counting
// it on the way: nothing is held beyond one copy buffer, so memory stays flat
// whatever the database size. The caller picks the member (the most up to date voter).
func (e *client) Snapshot(ctx context.Context, clientURL string, w io.Writer) (SnapshotInfo, error) {
	conn, err := e.c.Dial(clientURL)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("dial %s: %w", clientURL, err)
	}
	defer conn.Close()
	m := clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), e.c)
	// etcd sends no header with the snapshot stream, so the revision and identity come from
	// the member's status, asked just before.
	st, err := m.Status(ctx, clientURL)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("status of %s: %w", clientURL, err)
	}
	resp, err := m.SnapshotWithVersion(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("open snapshot stream from %s: %w", clientURL, err)
	}
	defer resp.Snapshot.Close()

	// Not hashed here: whoever stores the stream hashes what it stores, and a second sha256
	// of every byte is a tenth of a backup's time.
	n, err := io.Copy(w, resp.Snapshot)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("stream snapshot from %s after %d bytes: %w", clientURL, n, err)
	}
	return SnapshotInfo{
		Revision:       st.Header.Revision,
		EtcdVersion:    st.Version,
		StorageVersion: resp.Version,
		MemberID:       st.Header.MemberId,
		ClusterID:      st.Header.ClusterId,
		SizeBytes:      n,
	}, nil
}

// KeyspaceDigest identifies a member's keyspace at a revision, to check a restored copy
// against.
type KeyspaceDigest struct {
	Revision int64
	// Hash is etcd's HashKV: a hash of every version of every key from CompactRevision up to
	// Revision. Two stores with the same history agree on it only when compacted at the same
	// revision, so it is compared only together with CompactRevision.
	Hash            uint32
	CompactRevision int64
	// Keys is how many keys the keyspace held at Revision.
	Keys int64
}

// ErrCompacted is returned by KeyspaceAt for a revision the member has compacted away.
var ErrCompacted = errors.New("the revision has been compacted")

// KeyspaceAt asks the member serving clientURL for the digest of its keyspace at revision:
// its HashKV and the number of keys then. Both calls go to that member alone, as Snapshot's
// stream does, so that the digest describes the store the snapshot is taken from.
func (e *client) KeyspaceAt(ctx context.Context, clientURL string, revision int64) (KeyspaceDigest, error) {
	// HashKV reads the whole store: far longer than a membership call.
	ctx, cancel := context.WithTimeout(ctx, defragmentTimeout)
	defer cancel()
	conn, err := e.memberConn(clientURL)
	if err != nil {
		return KeyspaceDigest{}, err
	}
	m := clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), e.c)
	hash, err := m.HashKV(ctx, clientURL, revision)
	if errors.Is(rpctypes.Error(err), rpctypes.ErrCompacted) {
		return KeyspaceDigest{}, fmt.Errorf("hash the keyspace of %s at revision %d: %w", clientURL, revision, ErrCompacted)
	}
	if err != nil {
		return KeyspaceDigest{}, fmt.Errorf("hash the keyspace of %s at revision %d: %w", clientURL, revision, err)
	}
	kv := clientv3.NewKVFromKVClient(pb.NewKVClient(conn), e.c)
	count, err := kv.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly(), clientv3.WithRev(revision), clientv3.WithSerializable())
	if errors.Is(rpctypes.Error(err), rpctypes.ErrCompacted) {
		return KeyspaceDigest{}, fmt.Errorf("count the keys of %s at revision %d: %w", clientURL, revision, ErrCompacted)
	}
	if err != nil {
		return KeyspaceDigest{}, fmt.Errorf("count the keys of %s at revision %d: %w", clientURL, revision, err)
	}
	return KeyspaceDigest{Revision: revision, Hash: hash.Hash, CompactRevision: hash.CompactRevision, Keys: count.Count}, nil
}
