package access

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nkeys"
)

// Credentials are the users' nkeys, one seed file per user in a folder
// (DIR/<user>.nk, mode 0600, in a folder of mode 0700). A seed is the
// user's secret: the client signs the server's nonce with it and never
// sends it; the server knows only the public key.
type Credentials struct {
	// Dir is the folder of the seed files.
	Dir    string
	public map[string]string
}

// SeedFileMode is the mode of a seed file: its owner's only.
const SeedFileMode fs.FileMode = 0o600

// ErrBadSeedFile marks a seed file that is not a user's nkey seed.
var ErrBadSeedFile = errors.New("access: not an nkey user seed")

// LoadOrCreate reads the seed of every user of the table from dir and
// creates the seeds that are missing, so that a folder keeps its
// credentials across restarts and gains a seed for a user the table
// gained. A seed file readable by others is narrowed to 0600. A file
// that holds no user seed is an error: nothing is overwritten.
func LoadOrCreate(dir string) (*Credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("access: credentials folder: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("access: credentials folder: %w", err)
	}
	c := &Credentials{Dir: dir, public: map[string]string{}}
	for _, u := range Users {
		path := c.SeedFile(u.Name)
		pub, err := readSeed(path)
		if errors.Is(err, fs.ErrNotExist) {
			pub, err = createSeed(path, u.Name)
		}
		if err != nil {
			return nil, err
		}
		c.public[u.Name] = pub
	}
	return c, nil
}

// SeedFile is the path of user's seed file.
func (c *Credentials) SeedFile(user string) string { return filepath.Join(c.Dir, user+".nk") }

// Public is user's public nkey ("U..."), or "" for a user the table does
// not have.
func (c *Credentials) Public(user string) string { return c.public[user] }

// readSeed reads a seed file and returns its public key, narrowing the
// file's mode to 0600 when it is wider.
func readSeed(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&^SeedFileMode != 0 {
		if err := os.Chmod(path, SeedFileMode); err != nil {
			return "", fmt.Errorf("access: narrow %s to 0600: %w", path, err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	kp, err := ParseSeed(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %s (remove it to have a new one made): %w", ErrBadSeedFile, path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// ParseSeed reads a user's nkey seed from the contents of a seed file
// (the seed alone, or with comment lines, or decorated as nsc writes it).
func ParseSeed(raw []byte) (nkeys.KeyPair, error) {
	kp, err := nkeys.ParseDecoratedNKey(raw)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		kp.Wipe()
		return nil, fmt.Errorf("the seed is not a user's (public key %s)", pub)
	}
	return kp, nil
}

// createSeed writes a new user seed to path (mode 0600, written to a
// temporary file in the same folder and renamed, so a crash leaves no
// half-written seed) and returns its public key.
func createSeed(path, user string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("access: new nkey for %s: %w", user, err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# lowbarena NATS user %q: its nkey seed, a secret (keep this file 0600)\n# public key %s\n%s\n", user, pub, seed)
	if err := writeSecret(path, b.Bytes()); err != nil {
		return "", fmt.Errorf("access: write %s: %w", path, err)
	}
	return pub, nil
}

// writeSecret writes data to path with mode 0600 through a temporary file
// in the same folder.
func writeSecret(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(SeedFileMode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// EnvPublicKey is the environment variable that holds user's public nkey
// for a nats-server started from deploy/nats (LOWBARENA_NKEY_SCORE).
func EnvPublicKey(user string) string { return "LOWBARENA_NKEY_" + strings.ToUpper(user) }

// WriteEnvFiles writes, beside the seeds, the environment files a
// container deployment reads: nats.env (every user's public key, for the
// NATS servers' configuration) and <user>.env (LOWBARENA_NATS_NKEY, the
// user's seed, for its service; mode 0600). It returns the files written.
func (c *Credentials) WriteEnvFiles(seedVar string) ([]string, error) {
	users := make([]string, 0, len(c.public))
	for u := range c.public {
		users = append(users, u)
	}
	sort.Strings(users)
	var pubs bytes.Buffer
	pubs.WriteString("# Public nkeys of the arena's NATS users, for deploy/nats/auth.conf.\n")
	var written []string
	for _, u := range users {
		fmt.Fprintf(&pubs, "%s=%s\n", EnvPublicKey(u), c.public[u])
		raw, err := os.ReadFile(c.SeedFile(u))
		if err != nil {
			return written, err
		}
		kp, err := ParseSeed(raw)
		if err != nil {
			return written, fmt.Errorf("%w: %s: %w", ErrBadSeedFile, c.SeedFile(u), err)
		}
		seed, err := kp.Seed()
		if err != nil {
			kp.Wipe()
			return written, err
		}
		seed = append([]byte(nil), seed...) // Wipe clears the key's own copy
		kp.Wipe()
		path := filepath.Join(c.Dir, u+".env")
		if err := writeSecret(path, []byte(fmt.Sprintf("# NATS credentials of the arena's user %q (secret)\n%s=%s\n", u, seedVar, seed))); err != nil {
			return written, fmt.Errorf("access: write %s: %w", path, err)
		}
		written = append(written, path)
	}
	path := filepath.Join(c.Dir, "nats.env")
	if err := os.WriteFile(path, pubs.Bytes(), 0o644); err != nil {
		return written, fmt.Errorf("access: write %s: %w", path, err)
	}
	return append(written, path), nil
}
