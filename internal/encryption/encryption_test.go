package encryption_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/etcd-database/etcd-operator/internal/encryption"
)

func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A key's id is the first 16 hexadecimal digits of the sha256 of its recipient, as the docs
// say to compute it with age-keygen -y and sha256sum.
func TestKeyIDIsAShortHashOfTheRecipient(t *testing.T) {
	id := newIdentity(t)
	sum := sha256.Sum256([]byte(id.Recipient().String()))
	if got, want := encryption.KeyID(id.Recipient()), hex.EncodeToString(sum[:])[:16]; got != want {
		t.Fatalf("KeyID = %s, want %s", got, want)
	}
}

// The newest key is the entry whose name sorts last; every entry may be as age-keygen writes
// it, comments included.
func TestNewestKeyIsTheLastEntryByName(t *testing.T) {
	older, newer := newIdentity(t), newIdentity(t)
	keygenFile := "# created: 2026-11-27T10:00:00Z\n# public key: " + newer.Recipient().String() + "\n" + newer.String() + "\n"
	ring, err := encryption.Parse("backup-keys", map[string][]byte{"2026-01-15": []byte(older.String()), "2026-11-27": []byte(keygenFile)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ring.Newest(); got.Entry != "2026-11-27" || got.ID != encryption.KeyID(newer.Recipient()) {
		t.Fatalf("newest %s=%s, want 2026-11-27=%s", got.Entry, got.ID, encryption.KeyID(newer.Recipient()))
	}
	if !ring.Has(encryption.KeyID(older.Recipient())) || ring.Has("0000000000000000") {
		t.Fatalf("Has: %s", ring.Describe())
	}
}

// A Secret that cannot be used is refused with a message that names the Secret and the entry,
// and never quotes what an entry holds.
func TestParseRefusesWhatIsNotOneAgeKeyWithoutQuotingIt(t *testing.T) {
	a, b := newIdentity(t), newIdentity(t)
	truncated := a.String()[:40]
	for name, tc := range map[string]struct {
		data map[string][]byte
		says string
	}{
		"empty":        {map[string][]byte{}, "holds no key"},
		"truncated":    {map[string][]byte{"2026-11": []byte(truncated)}, "entry 2026-11 of Secret backup-keys is not an age identity"},
		"a public key": {map[string][]byte{"2026-11": []byte(a.Recipient().String())}, "entry 2026-11 of Secret backup-keys is not an age identity"},
		"two keys":     {map[string][]byte{"both": []byte(a.String() + "\n" + b.String())}, "holds 2 age identities, not one"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := encryption.Parse("backup-keys", tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Parse: %v, want %q", err, tc.says)
			}
			for _, secret := range []string{a.String(), b.String(), truncated[len("AGE-SECRET-KEY-1"):]} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a key: %v", err)
				}
			}
		})
	}
}

// What is encrypted to the newest key decrypts with any keyring that holds it, and with none
// that does not: that one fails naming the key the caller says the stream needs.
func TestEncryptDecryptAndAMissingKey(t *testing.T) {
	old, newest := newIdentity(t), newIdentity(t)
	ring, err := encryption.Parse("backup-keys", map[string][]byte{"a": []byte(old.String()), "b": []byte(newest.String())})
	if err != nil {
		t.Fatal(err)
	}
	var sealed bytes.Buffer
	w, key, err := ring.Encrypt(&sealed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "plaintext"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	stream, encrypted, err := encryption.Peek(bytes.NewReader(sealed.Bytes()))
	if err != nil || !encrypted {
		t.Fatalf("Peek: %v %v", encrypted, err)
	}
	plain, err := ring.Decrypt(stream, key.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(plain); string(got) != "plaintext" {
		t.Fatalf("decrypted %q", got)
	}

	oldOnly, err := encryption.Parse("old-keys", map[string][]byte{"a": []byte(old.String())})
	if err != nil {
		t.Fatal(err)
	}
	_, err = oldOnly.Decrypt(bytes.NewReader(sealed.Bytes()), key.ID)
	var missing *encryption.MissingKeyError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "key "+key.ID) || !strings.Contains(err.Error(), "Secret old-keys") {
		t.Fatalf("Decrypt without the key: %v", err)
	}

	if _, encrypted, _ := encryption.Peek(strings.NewReader("plain bytes")); encrypted {
		t.Fatal("plain bytes taken for encrypted")
	}
}

// A Secret mounted in a pod is read entry by entry, skipping the volume's own bookkeeping.
func TestReadDirSkipsTheVolumesBookkeeping(t *testing.T) {
	dir := t.TempDir()
	id := newIdentity(t)
	stamp := filepath.Join(dir, "..2026_11_27_10_00_00.000000001")
	if err := os.Mkdir(stamp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stamp, "2026-11"), []byte(id.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "2026-11"), filepath.Join(dir, "2026-11")); err != nil {
		t.Fatal(err)
	}
	ring, err := encryption.ReadDir("backup-keys", dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := ring.Describe(); got != "2026-11="+encryption.KeyID(id.Recipient()) {
		t.Fatalf("keys %s", got)
	}
}
