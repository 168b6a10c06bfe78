// Package server runs the gateway's HTTP server as hostile clients meet
// it: a deadline on the headers (which covers the TLS handshake), on
// reading a request and on idle connections, a bound on header size,
// HTTP/1.1 only, TLS from certificate files that are read again when they
// change, and a count of the clients that stall before their headers end
// (slow-loris clients), which the server can only hang up on.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure the server. Zero durations and sizes take the
// defaults named.
type Options struct {
	// ReadHeaderTimeout bounds reading a request's headers, and the TLS
	// handshake before them (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (default 30 s); an
	// upload renews its own deadline as its bytes come.
	ReadTimeout time.Duration
	// IdleTimeout bounds a kept-alive connection between requests
	// (default 60 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 16 KiB; larger
	// is answered 431).
	MaxHeaderBytes int
	// TLSCert and TLSKey are PEM files; both or neither. With them the
	// server speaks TLS 1.2 or later only.
	TLSCert, TLSKey string
	// Grace is how long requests in flight may take to finish at
	// shutdown (default 10 s).
	Grace time.Duration
	// OnHeaderTimeout is called once for each connection that stalled
	// with part of a request's headers (or of a TLS handshake) sent.
	OnHeaderTimeout func()
	// Log gets the server's own errors (default slog.Default()).
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 16 << 10
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Server is an HTTP server on one listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	o    Options
	tls  bool
	cert *certFiles
}

// New prepares a server for handler on ln. With TLS files it loads them
// now, so a missing or mismatched pair is an error at start.
func New(ln net.Listener, handler http.Handler, o Options) (*Server, error) {
	o.defaults()
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("server: TLS needs both a certificate file and a key file")
	}
	s := &Server{o: o}
	tl := &trackingListener{Listener: ln, onStall: o.OnHeaderTimeout}
	s.ln = tl
	if o.TLSCert != "" {
		c, err := loadCertFiles(o.TLSCert, o.TLSKey, o.Log)
		if err != nil {
			return nil, err
		}
		s.cert, s.tls = c, true
		// HTTP/1.1 only: the deadlines above are what they say for it.
		s.ln = tls.NewListener(tl, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get, NextProtos: []string{"http/1.1"}})
	}
	s.srv = &http.Server{
		Handler:           inRequest(handler),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          log.New(logWriter{o.Log}, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if t, ok := c.(*trackedConn); ok {
				return context.WithValue(ctx, connKey{}, t)
			}
			return ctx
		},
	}
	return s, nil
}

// TLS reports whether the server speaks TLS.
func (s *Server) TLS() bool { return s.tls }

// Run serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.Grace)
		defer cancel()
		if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("shut down %s: %w", s.ln.Addr(), err)
		}
		return nil
	}
}

type connKey struct{}

// inRequest marks a connection busy with a request while the handler
// runs, so that its reads timing out then (an upload's own deadline) are
// not counted as stalled headers.
func inRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			c.busy.Add(1)
			defer func() {
				c.partial.Store(0)
				c.busy.Add(-1)
			}()
		}
		next.ServeHTTP(w, r)
	})
}

// trackingListener wraps each accepted connection in a trackedConn.
type trackingListener struct {
	net.Listener
	onStall func()
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c, onStall: l.onStall}, nil
}

// trackedConn notices a read that times out while no handler runs and
// after some bytes of a request (or a TLS handshake) came: a client that
// stalled mid-headers. An idle kept-alive connection timing out has sent
// nothing since its last request and is not counted.
type trackedConn struct {
	net.Conn
	onStall func()
	busy    atomic.Int32
	partial atomic.Int64
	once    sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.busy.Load() == 0 {
		c.partial.Add(int64(n))
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.busy.Load() == 0 && c.partial.Load() > 0 && c.onStall != nil {
		c.once.Do(c.onStall)
	}
	return n, err
}

// certFiles serves a certificate from files, reading them again when
// either changes (a renewal by cert-manager or certbot needs no restart).
// A pair that does not load (caught mid-renewal) keeps the last good one
// in service and is tried again on a later handshake.
type certFiles struct {
	certPath, keyPath string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

func loadCertFiles(certPath, keyPath string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{certPath: certPath, keyPath: keyPath, log: log}
	cert, stamp, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cert, c.stamp, c.checked = cert, stamp, time.Now()
	return c, nil
}

func (c *certFiles) load() (*tls.Certificate, string, error) {
	stamp, err := c.fileStamp()
	if err != nil {
		return nil, "", err
	}
	cert, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		return nil, "", fmt.Errorf("server: TLS certificate %s and key %s: %w", c.certPath, c.keyPath, err)
	}
	return &cert, stamp, nil
}

func (c *certFiles) fileStamp() (string, error) {
	stamp := ""
	for _, p := range []string{c.certPath, c.keyPath} {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("server: TLS file: %w", err)
		}
		stamp += fmt.Sprintf("%d.%d;", st.ModTime().UnixNano(), st.Size())
	}
	return stamp, nil
}

// reloadEvery bounds how often the files are looked at.
const reloadEvery = time.Second

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < reloadEvery {
		return c.cert, nil
	}
	c.checked = time.Now()
	if stamp, err := c.fileStamp(); err != nil || stamp == c.stamp {
		return c.cert, nil
	}
	cert, stamp, err := c.load()
	if err != nil {
		c.log.Warn("the TLS files changed but do not load; serving the previous certificate", "err", err)
		return c.cert, nil
	}
	c.cert, c.stamp = cert, stamp
	c.log.Info("TLS certificate reloaded", "cert", c.certPath)
	return c.cert, nil
}

// logWriter sends net/http's own error lines (a failed handshake, a
// broken connection) to the log at debug level: they are clients'
// faults, counted where they matter.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Debug("http server", "msg", string(p))
	return len(p), nil
}
