package storage

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Check is how a destination vouched that an object holds what was streamed to it: the
// Succeeded condition of a backup names it.
type Check string

const (
	// CheckStoreChecksum: every part was sent with its sha256, which the store verified on
	// receipt, and the object's checksum and size, as the store reported them afterwards,
	// match what was streamed.
	CheckStoreChecksum Check = "sha256 checked by the store"
	// CheckSizeAfterSync: the file was written by this process, which hashed what it wrote,
	// synced with its directory, and its size, as the file system reports it after the sync,
	// is what was streamed.
	CheckSizeAfterSync Check = "size checked after fsync"
	// CheckReadBack: the whole object was read back from the destination and hashed.
	CheckReadBack Check = "read back"
)

// StoreOptions tunes Store.
type StoreOptions struct {
	// ReadBack reads the whole object back and compares its sha256 with what was streamed,
	// whatever the destination vouches for: the check of record before the destinations'
	// own checks were trusted, kept for who wants the second pass.
	ReadBack bool
}

// Stored is an object Store left in the destination: the size and sha256 of what was
// streamed, which the destination holds, and how that was established.
type Stored struct {
	Artifact
	Check Check
	// Why says, when the object was read back though StoreOptions did not ask for it, what
	// the destination would not vouch for.
	Why string
}

// Described is the check as a sentence's end: "sha256 checked by the store", or "read back
// (the store returned no checksum)".
func (s Stored) Described() string {
	if s.Why == "" {
		return string(s.Check)
	}
	return fmt.Sprintf("%s (%s)", s.Check, s.Why)
}

// Store streams what write writes into key, with metadata, then checks that the destination
// holds exactly that: the count and sha256 of what was written, against what the destination
// vouches for (the S3 store's checksums of what it received, a synced file's size) or, with
// opts.ReadBack or a store that keeps no checksum, against a full read-back. The object
// appears only once complete; a failed write, upload or check leaves nothing under key.
//
// The data is hashed once as it is written, and each S3 part once more, in parallel (the
// store checks that hash): no second pass over what was sent.
func (d *Destination) Store(ctx context.Context, key string, metadata map[string]string, opts StoreOptions, write func(io.Writer) error) (Stored, error) {
	var sent streamed
	var err error
	if d.dir != "" {
		sent, err = d.writeFile(ctx, key, metadata, write)
	} else {
		sent, err = d.uploadParts(ctx, key, metadata, write)
	}
	if err != nil {
		return Stored{}, err
	}
	if d.beforeCheck != nil {
		d.beforeCheck(key)
	}
	stored, err := d.check(ctx, key, sent, opts.ReadBack)
	if err != nil {
		// What the check could not vouch for is not a backup: nothing is left to be listed,
		// pruned around or restored. A check that failed for want of an answer deletes too:
		// the object is then not known to hold what was streamed.
		_ = d.Delete(ctx, key)
		return Stored{}, err
	}
	return stored, nil
}

// streamed is what Store's write wrote, and what the destination was given to vouch for it.
type streamed struct {
	size   int64
	sha256 []byte
	// storeChecksums are the S3 checksum values (base64) a store that checked every part may
	// report for the object: the composite one ("<sha256 of the parts' sha256s>-<parts>") and
	// the object's own sha256. Empty when the parts were sent without checksums.
	storeChecksums []string
	// unchecked says why the parts went without checksums.
	unchecked string
}

func (s streamed) hex() string { return hex.EncodeToString(s.sha256) }

// check establishes that key holds what was streamed, the cheapest way the destination
// allows.
func (d *Destination) check(ctx context.Context, key string, sent streamed, readBack bool) (Stored, error) {
	stored := Stored{Artifact: Artifact{Key: key, SizeBytes: sent.size, SHA256: sent.hex()}}
	switch {
	case readBack:
		stored.Check = CheckReadBack
	case d.dir != "":
		size, err := d.fileSize(key)
		if err != nil {
			return Stored{}, err
		}
		if size != sent.size {
			return Stored{}, fmt.Errorf("%s holds %d bytes after the sync but %d bytes were streamed (sha256 %s); deleted it",
				d.URI(key), size, sent.size, sent.hex())
		}
		stored.Check = CheckSizeAfterSync
		return stored, nil
	case sent.unchecked != "":
		stored.Check, stored.Why = CheckReadBack, sent.unchecked
	default:
		size, checksum, err := d.headChecksum(ctx, key)
		if err != nil {
			return Stored{}, err
		}
		if checksum == "" {
			stored.Check, stored.Why = CheckReadBack, "the store returned no checksum for the object"
			break
		}
		if size != sent.size || !matchesChecksum(checksum, sent.storeChecksums) {
			return Stored{}, fmt.Errorf("%s holds %d bytes with checksum %s but %d bytes were streamed (sha256 %s, checksums %s); deleted it",
				d.URI(key), size, checksum, sent.size, sent.hex(), strings.Join(sent.storeChecksums, " or "))
		}
		stored.Check = CheckStoreChecksum
		return stored, nil
	}
	read, err := d.Verify(ctx, key)
	if err != nil {
		return Stored{}, err
	}
	if read.SizeBytes != sent.size || read.SHA256 != sent.hex() {
		return Stored{}, fmt.Errorf("%s holds %d bytes (sha256 %s) but %d bytes (sha256 %s) were streamed; deleted it",
			d.URI(key), read.SizeBytes, read.SHA256, sent.size, sent.hex())
	}
	stored.ModTime = read.ModTime
	return stored, nil
}

// matchesChecksum says whether the checksum a store reports is one of those it could report
// for what was streamed. A composite checksum is compared with its part count; a store that
// leaves the count out is held to the rest.
func matchesChecksum(reported string, expected []string) bool {
	for _, want := range expected {
		if reported == want {
			return true
		}
		if sum, _, composite := strings.Cut(want, "-"); composite && reported == sum {
			return true
		}
	}
	return false
}

// plainKey refuses a key the gocloud drivers would escape (control characters, "../", "//",
// a trailing slash, their own escape sequence): Store writes without them, and the object
// must be where they read it. Snapshot names never need escaping.
func plainKey(key string) error {
	if key == "" || strings.HasSuffix(key, "/") || strings.Contains(key, "../") || strings.Contains(key, "//") ||
		strings.Contains(key, "__0x") || strings.HasSuffix(key, attributesFileSuffix) ||
		strings.ContainsFunc(key, func(r rune) bool { return r < 32 }) {
		return errors.New("the key " + fmt.Sprintf("%q", key) + " would need escaping; Store takes plain keys only")
	}
	return nil
}
