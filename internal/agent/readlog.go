package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// When quorum is lost for good the operator recovers from the survivor whose log reaches
// furthest. A member that answers says how far (its raft index); one that cannot answer (a
// cluster with password authentication cannot authenticate anyone without a quorum, a member
// that crashes at start) is read from its data by a read-log Job: its WAL's last hard state
// holds the index of the newest committed entry, which is exactly what etcd keeps of the log
// when restarted with --force-new-cluster (it drops the uncommitted rest). The WAL is read, not
// locked or written, so the Job may run beside the member's own pod.

// LogState is how far a member's raft log reaches, as its WAL records it.
type LogState struct {
	Member string `json:"member"`
	// CommitIndex is the highest committed raft index in the WAL's hard states: comparable to
	// the raft index a serving member reports.
	CommitIndex uint64 `json:"commitIndex"`
	// Term of that hard state.
	Term uint64 `json:"term"`
	// WALFiles read, in order.
	WALFiles int `json:"walFiles"`
	// Torn is set when reading stopped at a record that is cut short or fails its checksum
	// (a member killed mid-write): CommitIndex is then what the WAL holds before it.
	Torn bool `json:"torn,omitempty"`
}

// The WAL's record types (etcd server/storage/wal) this reader needs.
const (
	walStateType = 3 // a raftpb.HardState
	walCRCType   = 4 // the running checksum of the records before, at the start of each file
)

// walFileName is a WAL segment's name: sequence number and first raft index, in hex.
var walFileName = regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]{16}\.wal$`)

// walCRCTable is the WAL's checksum: CRC-32C, chained from record to record and file to file.
var walCRCTable = crc32.MakeTable(crc32.Castagnoli)

// ReadLog reads the raft log's reach from the WAL of the etcd data directory dataDir, without
// writing to it or locking it.
func ReadLog(member, dataDir string) (LogState, error) {
	walDir := filepath.Join(dataDir, "member", "wal")
	entries, err := os.ReadDir(walDir)
	if errors.Is(err, fs.ErrNotExist) {
		return LogState{}, permanentError{fmt.Errorf("%s does not exist: the member's claim holds no etcd data", walDir)}
	}
	if err != nil {
		return LogState{}, err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && walFileName.MatchString(e.Name()) {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return LogState{}, permanentError{fmt.Errorf("%s holds no WAL file", walDir)}
	}
	slices.Sort(files) // by sequence number: the names are fixed-width hex
	out := LogState{Member: member}
	r := walReader{state: &out}
	for _, name := range files {
		out.WALFiles++
		complete, err := r.readFile(filepath.Join(walDir, name))
		if err != nil {
			return LogState{}, err
		}
		if !complete {
			out.Torn = true
			break
		}
	}
	if out.CommitIndex == 0 {
		return LogState{}, permanentError{fmt.Errorf("the WAL in %s records no committed entry", walDir)}
	}
	return out, nil
}

// walReader decodes WAL records across files, keeping the chained checksum.
type walReader struct {
	crc   uint32
	state *LogState
}

// readFile reads one WAL file's records up to its end: the end of the file or the zeros of
// its preallocated tail. complete is false if it stopped at a record cut short or failing its
// checksum; what follows such a record cannot be trusted.
func (w *walReader) readFile(path string) (complete bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	in := bufio.NewReaderSize(f, 1<<20)
	remaining := info.Size()
	for {
		var frame [8]byte
		if _, err := io.ReadFull(in, frame[:]); err == io.EOF {
			return true, nil
		} else if err != nil {
			return false, nil // cut short
		}
		remaining -= 8
		recordBytes, padBytes := decodeFrameSize(int64(binary.LittleEndian.Uint64(frame[:])))
		if recordBytes == 0 {
			return true, nil // the zeroed tail the WAL preallocates
		}
		if recordBytes+padBytes > remaining {
			return false, nil
		}
		buf := make([]byte, recordBytes+padBytes)
		if _, err := io.ReadFull(in, buf); err != nil {
			return false, nil
		}
		remaining -= recordBytes + padBytes
		if !w.record(buf[:recordBytes]) {
			return false, nil
		}
	}
}

// decodeFrameSize splits a WAL frame's length field: the record's length in the low 56 bits,
// and, when the top bit is set, the padding after it in the low 3 bits of the top byte.
func decodeFrameSize(field int64) (recordBytes, padBytes int64) {
	recordBytes = int64(uint64(field) & ^(uint64(0xff) << 56))
	if field < 0 {
		padBytes = int64((uint64(field) >> 56) & 0x7)
	}
	return recordBytes, padBytes
}

// record checks one record (a walpb.Record: type, crc, data) against the chained checksum and
// takes what it needs from it; false if it is not a whole, intact record.
func (w *walReader) record(b []byte) bool {
	var typ int64
	var crc uint32
	var data []byte
	for len(b) > 0 {
		num, wireType, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && wireType == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			typ, b = int64(v), b[n:]
		case num == 2 && wireType == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			crc, b = uint32(v), b[n:]
		case num == 3 && wireType == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			data, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, wireType, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	if typ == walCRCType {
		// Each file opens with the checksum of every record before it; the first file's is 0.
		if w.crc != 0 && crc != w.crc {
			return false
		}
		w.crc = crc
		return true
	}
	w.crc = crc32.Update(w.crc, walCRCTable, data)
	if crc != w.crc {
		return false
	}
	if typ == walStateType {
		term, commit, ok := hardState(data)
		if !ok {
			return false
		}
		if commit > w.state.CommitIndex {
			w.state.CommitIndex, w.state.Term = commit, term
		}
	}
	return true
}

// hardState decodes a raftpb.HardState's term (field 1) and commit (field 3).
func hardState(b []byte) (term, commit uint64, ok bool) {
	for len(b) > 0 {
		num, wireType, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		if wireType != protowire.VarintType {
			n := protowire.ConsumeFieldValue(num, wireType, b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch num {
		case 1:
			term = v
		case 3:
			commit = v
		}
	}
	return term, commit, true
}
