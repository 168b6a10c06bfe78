package app

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Environment variables of the NATS client's credentials and TLS files.
// Secrets (a seed, a password) are read from the environment or a file,
// never from a flag: a command line is visible to every user of the
// machine.
const (
	// EnvNATSCreds names a credentials file: an nkey seed (`arena up`
	// writes DATA/credentials/<user>.nk; `arena credentials DIR` writes
	// DIR/<user>.nk) or a NATS JWT .creds file.
	EnvNATSCreds = "LOWBARENA_NATS_CREDS"
	// EnvNATSNkey holds an nkey seed itself (a container's environment).
	EnvNATSNkey = "LOWBARENA_NATS_NKEY"
	// EnvNATSUser and EnvNATSPassword are a NATS user with a password;
	// EnvNATSPasswordFile names a file holding the password instead.
	EnvNATSUser         = "LOWBARENA_NATS_USER"
	EnvNATSPassword     = "LOWBARENA_NATS_PASSWORD"
	EnvNATSPasswordFile = "LOWBARENA_NATS_PASSWORD_FILE"
	// EnvNATSCA, EnvNATSCert and EnvNATSKey are TLS files: the CA that
	// signed the server's certificate, and the client's certificate and
	// key where the server asks for one.
	EnvNATSCA   = "LOWBARENA_NATS_CA"
	EnvNATSCert = "LOWBARENA_NATS_CERT"
	EnvNATSKey  = "LOWBARENA_NATS_KEY"
	// EnvProvision is the provisioning mode (see Config.Provision).
	EnvProvision = "LOWBARENA_PROVISION"
)

// NATSAuth is how a client proves to NATS which user it is. At most one
// way is set; none connects anonymously (an open NATS, as in tests).
type NATSAuth struct {
	// CredsFile is a file holding an nkey seed or a JWT .creds file.
	CredsFile string
	// Nkey is an nkey seed itself.
	Nkey string
	// User and Password are a user with a password; PasswordFile names
	// a file holding the password instead of Password.
	User, Password, PasswordFile string
}

// AuthFromEnv reads NATSAuth from the environment variables above.
func AuthFromEnv() NATSAuth {
	return NATSAuth{CredsFile: os.Getenv(EnvNATSCreds), Nkey: os.Getenv(EnvNATSNkey),
		User: os.Getenv(EnvNATSUser), Password: os.Getenv(EnvNATSPassword), PasswordFile: os.Getenv(EnvNATSPasswordFile)}
}

// Set reports whether a is any credentials at all.
func (a NATSAuth) Set() bool {
	return a.CredsFile != "" || a.Nkey != "" || a.User != "" || a.Password != "" || a.PasswordFile != ""
}

// Describe names the credentials for people, never quoting a secret.
func (a NATSAuth) Describe() string {
	switch {
	case a.CredsFile != "":
		return "credentials file " + a.CredsFile
	case a.Nkey != "":
		return "the nkey seed in " + EnvNATSNkey
	case a.User != "":
		return "user " + a.User
	}
	return "no credentials"
}

// problems lists what is wrong with a, for Validate.
func (a NATSAuth) problems() []string {
	var errs []string
	n := 0
	for _, set := range []bool{a.CredsFile != "", a.Nkey != "", a.User != "" || a.Password != "" || a.PasswordFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		errs = append(errs, "NATS credentials: give one of a credentials file ("+EnvNATSCreds+"), a seed ("+EnvNATSNkey+") or a user and password ("+EnvNATSUser+"), not several")
	}
	if a.CredsFile != "" {
		if err := readable(a.CredsFile); err != nil {
			errs = append(errs, "NATS credentials file: "+err.Error())
		}
	}
	if a.Nkey != "" {
		if kp, err := access.ParseSeed([]byte(a.Nkey)); err != nil {
			errs = append(errs, EnvNATSNkey+" is not a user's nkey seed")
		} else {
			kp.Wipe()
		}
	}
	if (a.Password != "" || a.PasswordFile != "") && a.User == "" {
		errs = append(errs, "a NATS password needs its user ("+EnvNATSUser+" or --nats-user)")
	}
	if a.User != "" && a.Password == "" && a.PasswordFile == "" {
		errs = append(errs, "NATS user "+a.User+" needs a password ("+EnvNATSPassword+" or --nats-password-file)")
	}
	if a.Password != "" && a.PasswordFile != "" {
		errs = append(errs, "give the NATS password in "+EnvNATSPassword+" or in a file, not both")
	}
	if a.PasswordFile != "" {
		if err := readable(a.PasswordFile); err != nil {
			errs = append(errs, "NATS password file: "+err.Error())
		}
	}
	return errs
}

// options are nats.go's options for a.
func (a NATSAuth) options() ([]nats.Option, error) {
	switch {
	case a.CredsFile != "":
		raw, err := os.ReadFile(a.CredsFile)
		if err != nil {
			return nil, fmt.Errorf("%w: NATS credentials: %w", ErrConfig, err)
		}
		if strings.Contains(string(raw), "BEGIN NATS USER JWT") {
			return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
		}
		opt, err := nats.NkeyOptionFromSeed(a.CredsFile)
		if err != nil {
			return nil, fmt.Errorf("%w: NATS credentials file %s holds neither an nkey seed nor a JWT: %w", ErrConfig, a.CredsFile, err)
		}
		return []nats.Option{opt}, nil
	case a.Nkey != "":
		kp, err := access.ParseSeed([]byte(a.Nkey))
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not a user's nkey seed", ErrConfig, EnvNATSNkey)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, EnvNATSNkey, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			kp.Wipe()
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, EnvNATSNkey, err)
		}
		seed = append([]byte(nil), seed...) // Wipe clears the key's own copy
		kp.Wipe()
		return []nats.Option{nats.Nkey(pub, func(nonce []byte) ([]byte, error) {
			kp, err := nkeys.FromSeed(seed)
			if err != nil {
				return nil, err
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		})}, nil
	case a.User != "":
		pw := a.Password
		if a.PasswordFile != "" {
			raw, err := os.ReadFile(a.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("%w: NATS password file: %w", ErrConfig, err)
			}
			pw = strings.TrimRight(string(raw), "\r\n")
		}
		return []nats.Option{nats.UserInfo(a.User, pw)}, nil
	}
	return nil, nil
}

// NATSTLS are the client's TLS files. With a CA the client verifies the
// server's certificate against it (else against the system's roots);
// with a certificate and key it presents them where the server asks.
type NATSTLS struct {
	CA, Cert, Key string
}

// TLSFromEnv reads NATSTLS from the environment variables above.
func TLSFromEnv() NATSTLS {
	return NATSTLS{CA: os.Getenv(EnvNATSCA), Cert: os.Getenv(EnvNATSCert), Key: os.Getenv(EnvNATSKey)}
}

func (t NATSTLS) problems() []string {
	var errs []string
	if (t.Cert == "") != (t.Key == "") {
		errs = append(errs, "a NATS client certificate needs its key, and a key its certificate (--nats-cert, --nats-key)")
	}
	for name, f := range map[string]string{"CA": t.CA, "certificate": t.Cert, "key": t.Key} {
		if f == "" {
			continue
		}
		if err := readable(f); err != nil {
			errs = append(errs, "NATS TLS "+name+": "+err.Error())
		}
	}
	return errs
}

func (t NATSTLS) options() []nats.Option {
	var opts []nats.Option
	if t.CA != "" {
		opts = append(opts, nats.RootCAs(t.CA))
	}
	if t.Cert != "" {
		opts = append(opts, nats.ClientCert(t.Cert, t.Key))
	}
	return opts
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// registerNATSFlags adds the client's credential and TLS flags to fs.
func (c *Config) registerNATSFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NATSAuth.CredsFile, "nats-creds", c.NATSAuth.CredsFile, "NATS credentials file: an nkey seed or a JWT .creds file (env "+EnvNATSCreds+"; a seed itself: "+EnvNATSNkey+")")
	fs.StringVar(&c.NATSAuth.User, "nats-user", c.NATSAuth.User, "NATS user, with a password in "+EnvNATSPassword+" or --nats-password-file (env "+EnvNATSUser+")")
	fs.StringVar(&c.NATSAuth.PasswordFile, "nats-password-file", c.NATSAuth.PasswordFile, "file holding the NATS user's password (env "+EnvNATSPasswordFile+")")
	fs.StringVar(&c.NATSTLS.CA, "nats-ca", c.NATSTLS.CA, "CA certificate that signed the NATS server's (env "+EnvNATSCA+")")
	fs.StringVar(&c.NATSTLS.Cert, "nats-cert", c.NATSTLS.Cert, "client certificate for NATS, where the server asks for one (env "+EnvNATSCert+")")
	fs.StringVar(&c.NATSTLS.Key, "nats-key", c.NATSTLS.Key, "client key for NATS (env "+EnvNATSKey+")")
	fs.StringVar(&c.Provision, "provision", c.Provision, "create or update the arena's streams and buckets at start: auto (only without credentials), yes or no (env "+EnvProvision+")")
}

// Provisioning modes (Config.Provision).
const (
	ProvisionAuto = "auto"
	ProvisionYes  = "yes"
	ProvisionNo   = "no"
)

// provisions reports whether Start provisions the arena's topology: with
// auto, only a client without credentials does (an open NATS); a user of
// the permission table may not create streams, an operator does that
// (`arena up`, or `<service> provision` with the operator's credentials).
func (c Config) provisions() bool {
	switch c.Provision {
	case ProvisionYes:
		return true
	case ProvisionNo:
		return false
	}
	return !c.NATSAuth.Set()
}

// Errors of Connect. Each has a stable code for scripts and dashboards.
var (
	// ErrNATSUnreachable is returned when no NATS server answers.
	ErrNATSUnreachable = errors.New("no NATS server answers")
	// ErrNATSAuth is returned when the server refuses the credentials
	// (code nats_auth_failed).
	ErrNATSAuth = errors.New(string(reason.NATSAuthFailed) + ": the NATS server refused these credentials")
	// ErrNATSTLS is returned when the TLS handshake fails: the server's
	// certificate is not trusted, or the server wants TLS the client was
	// not given (code nats_tls_failed).
	ErrNATSTLS = errors.New("nats_tls_failed: no TLS connection to NATS")
)

// NATSClient is what a client needs to reach the arena's NATS.
type NATSClient struct {
	// URLs is a comma-separated list of server URLs.
	URLs string
	// Name names the connection (the server's monitoring shows it).
	Name string
	// User is the user of the permission table it connects as: its
	// inboxes are the user's (access.InboxPrefix), the only ones its
	// permissions let it subscribe to. Empty: nats.go's default inboxes.
	User string
	Auth NATSAuth
	TLS  NATSTLS
}

// NATSClient is c's client settings.
func (c Config) NATSClient() NATSClient {
	return NATSClient{URLs: c.NATSURL, Name: "lowbarena-" + c.Service, User: c.Service, Auth: c.NATSAuth, TLS: c.NATSTLS}
}

// ConnectNATS opens a NATS connection that reconnects forever once it has
// been up, and fails fast when it cannot start: ErrNATSUnreachable when
// no server answers, ErrNATSAuth when the server refuses the credentials,
// ErrNATSTLS when TLS fails. A permissions violation later on is
// logged with its code (permission_denied); the operation it refused
// fails with a *bus.DeniedError.
func ConnectNATS(c NATSClient, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.Timeout(3 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
	}
	if c.User != "" {
		opts = append(opts, nats.CustomInboxPrefix(access.InboxPrefix(c.User)))
	}
	auth, err := c.Auth.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, auth...)
	opts = append(opts, c.TLS.options()...)
	if log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("NATS disconnected", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
		)
	}
	// Async errors (a refused publish or subscription) are logged with
	// their code; the operation they refused fails with a
	// *bus.DeniedError where it waits (bus.Guard). Without a logger they
	// are dropped here rather than printed by nats.go.
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if log == nil {
			return
		}
		if de := bus.ParseDenied(err); de != nil {
			log.Error("NATS refused", "reason", de.Code(), "op", de.Op, "subject", de.Subject, "user", c.User)
			return
		}
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		log.Warn("NATS error", "err", err, "subject", subject)
	}))
	nc, err := nats.Connect(c.URLs, opts...)
	if err == nil {
		return nc, nil
	}
	switch {
	case errors.Is(err, nats.ErrNoServers):
		return nil, fmt.Errorf("%w at %s: %w", ErrNATSUnreachable, c.URLs, err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return nil, fmt.Errorf("%w at %s (%s)", ErrNATSAuth, c.URLs, c.Auth.Describe())
	case isTLSError(err):
		return nil, fmt.Errorf("%w at %s: %w (give the CA that signed the server's certificate with --nats-ca or %s)", ErrNATSTLS, c.URLs, err, EnvNATSCA)
	}
	return nil, fmt.Errorf("runtime: connect to NATS at %s: %w", c.URLs, err)
}

func isTLSError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	return errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) ||
		strings.Contains(err.Error(), "tls: ")
}
