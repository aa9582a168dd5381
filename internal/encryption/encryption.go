// Package encryption encrypts snapshots as they stream to a backup destination and decrypts
// them as they stream back, with age (filippo.io/age) and X25519 keys from a Secret: one age
// identity per entry of the Secret's data. The entry whose name sorts last is the newest key
// and encrypts; every key decrypts, so keys rotate while the snapshots of older keys stay
// restorable. A key is named by its id, a short hash of its public recipient, which is
// recorded with each snapshot (object metadata, and the EtcdBackup's status) and is never
// secret. The identities themselves never reach a message of this package.
package encryption

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"filippo.io/age"
)

// MetadataKeyID is the object metadata an encrypted snapshot's key id is stored under (S3 user
// metadata; a claim's attribute file next to the snapshot).
const MetadataKeyID = "etcd-encryption-key-id"

// magic is how every age file begins: how an encrypted snapshot is told from a plain one.
const magic = "age-encryption.org/v1\n"

// Key is one of a Secret's age identities.
type Key struct {
	// Entry is the name of the Secret's data entry holding it.
	Entry string
	// ID names the key in status, metadata and messages: KeyID of its recipient.
	ID       string
	identity *age.X25519Identity
}

// Recipient is the key's public half, which encrypts to it.
func (k Key) Recipient() *age.X25519Recipient { return k.identity.Recipient() }

// KeyID is a key's id: the first 16 hexadecimal digits of the sha256 of its recipient as age
// writes it (age1...). `age-keygen -y key.txt | tr -d '\n' | sha256sum | cut -c1-16` prints it.
func KeyID(r *age.X25519Recipient) string {
	sum := sha256.Sum256([]byte(r.String()))
	return hex.EncodeToString(sum[:])[:16]
}

// Keyring is the keys of one Secret, by entry name.
type Keyring struct {
	secret string
	keys   []Key // sorted by Entry
}

// Parse reads the keys of Secret secret from its data: every entry must hold one age X25519
// identity (AGE-SECRET-KEY-1..., alone or as age-keygen writes it, with its comment lines).
// Its errors name the Secret and the entry, never what the entry holds.
func Parse(secret string, data map[string][]byte) (*Keyring, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("Secret %s holds no key: give it one entry per age identity, such as `age-keygen -o key.txt` then `kubectl create secret generic %s --from-file=<YYYY-MM-DD>=key.txt`", secret, secret)
	}
	ring := &Keyring{secret: secret}
	for entry, value := range data {
		identity, err := parseIdentity(value)
		if err != nil {
			return nil, fmt.Errorf("entry %s of Secret %s %w: give each entry one key as `age-keygen` writes it (a line AGE-SECRET-KEY-1...)", entry, secret, err)
		}
		ring.keys = append(ring.keys, Key{Entry: entry, ID: KeyID(identity.Recipient()), identity: identity})
	}
	slices.SortFunc(ring.keys, func(a, b Key) int { return strings.Compare(a.Entry, b.Entry) })
	return ring, nil
}

// parseIdentity is the one X25519 identity value holds. Its errors say what is wrong without
// quoting the value: age's own parse errors may.
func parseIdentity(value []byte) (*age.X25519Identity, error) {
	identities, err := age.ParseIdentities(bytes.NewReader(value))
	if err != nil {
		return nil, errors.New("is not an age identity")
	}
	if len(identities) != 1 {
		return nil, fmt.Errorf("holds %d age identities, not one", len(identities))
	}
	x25519, ok := identities[0].(*age.X25519Identity)
	if !ok {
		return nil, errors.New("is not an age X25519 identity")
	}
	return x25519, nil
}

// ReadDir reads a Secret as mounted in a pod: a file per entry. The volume's own bookkeeping
// (..data and the timestamped directory it points to) is no entry: Kubernetes refuses entry
// names beginning with "..".
func ReadDir(secret, dir string) (*Keyring, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the keys of Secret %s: %w", secret, err)
	}
	data := map[string][]byte{}
	for _, f := range files {
		if strings.HasPrefix(f.Name(), "..") {
			continue
		}
		value, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			return nil, fmt.Errorf("read entry %s of Secret %s: %w", f.Name(), secret, err)
		}
		data[f.Name()] = value
	}
	return Parse(secret, data)
}

// Secret is the name of the Secret the keys come from.
func (k *Keyring) Secret() string { return k.secret }

// Newest is the key that encrypts: the one whose entry name sorts last (byte order), such
// as 2027-01 after 2026-11.
func (k *Keyring) Newest() Key { return k.keys[len(k.keys)-1] }

// Has says whether the keyring holds the key with id.
func (k *Keyring) Has(id string) bool {
	return slices.ContainsFunc(k.keys, func(key Key) bool { return key.ID == id })
}

// Describe lists the keys as entry=id, for messages.
func (k *Keyring) Describe() string {
	var out []string
	for _, key := range k.keys {
		out = append(out, key.Entry+"="+key.ID)
	}
	return strings.Join(out, ", ")
}

// Encrypt returns a writer that encrypts what is written to it to the newest key, into dst,
// and the key; Close writes the last chunk.
func (k *Keyring) Encrypt(dst io.Writer) (io.WriteCloser, Key, error) {
	key := k.Newest()
	w, err := age.Encrypt(dst, key.Recipient())
	if err != nil {
		return nil, Key{}, fmt.Errorf("encrypt to key %s: %w", key.ID, err)
	}
	return w, key, nil
}

// MissingKeyError is a snapshot encrypted to a key the keyring does not hold.
type MissingKeyError struct {
	// KeyID of the key the snapshot needs, as recorded with it; empty when unknown.
	KeyID  string
	Secret string
	// Holds describes the keys the Secret holds.
	Holds string
}

func (e *MissingKeyError) Error() string {
	needs := "a key it does not hold"
	if e.KeyID != "" {
		needs = "key " + e.KeyID
	}
	return fmt.Sprintf("the snapshot is encrypted to %s, which Secret %s does not hold (it holds %s): put that key's age identity back into the Secret, or name the Secret that holds it",
		needs, e.Secret, e.Holds)
}

// Decrypt returns a reader of the plaintext of src, an age file encrypted to one of the keys,
// and fails, having read only src's header, when none of them opens it: a *MissingKeyError
// naming keyID, the key recorded with the snapshot. Every chunk is authenticated as it is
// read: a snapshot changed in storage fails the read.
func (k *Keyring) Decrypt(src io.Reader, keyID string) (io.Reader, error) {
	identities := make([]age.Identity, 0, len(k.keys))
	for _, key := range k.keys {
		identities = append(identities, key.identity)
	}
	r, err := age.Decrypt(src, identities...)
	var noMatch *age.NoIdentityMatchError
	if errors.As(err, &noMatch) {
		return nil, &MissingKeyError{KeyID: keyID, Secret: k.secret, Holds: k.Describe()}
	}
	if err != nil {
		return nil, fmt.Errorf("read the encryption header: %w", err)
	}
	return r, nil
}

// Peek says whether the stream r reads is encrypted, and returns a reader of the whole stream,
// from its first byte.
func Peek(r io.Reader) (io.Reader, bool, error) {
	buffered := bufio.NewReader(r)
	head, err := buffered.Peek(len(magic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	return buffered, string(head) == magic, nil
}
