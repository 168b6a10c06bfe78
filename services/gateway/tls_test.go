package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// to dir/cert.pem and dir/key.pem (replacing them as a renewal does:
// new files renamed over the old) and returns it.
func writeCert(t *testing.T, dir string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "lowbarena gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	for name, block := range map[string]*pem.Block{"cert.pem": {Type: "CERTIFICATE", Bytes: der}, "key.pem": {Type: "EC PRIVATE KEY", Bytes: kb}} {
		tmp := filepath.Join(dir, name+".new")
		require.NoError(t, os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
	}
	return cert
}

// TestTLS: with --tls-cert and --tls-key the API speaks TLS only (1.2 or
// later, HSTS on every answer), and a renewed certificate is served
// without a restart.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	first := writeCert(t, dir, 1)
	g := startGateway(t, map[string]string{"tls-cert": filepath.Join(dir, "cert.pem"), "tls-key": filepath.Join(dir, "key.pem")}, nil)
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	client := func(trust *x509.Certificate) *http.Client {
		pool := x509.NewCertPool()
		pool.AddCert(trust)
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+g.addr+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := client(first).Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"name":"alice"`)
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))
	require.Equal(t, "HTTP/1.1", resp.Proto)
	require.Equal(t, uint16(tls.VersionTLS13), resp.TLS.Version)

	// Plain HTTP is not served.
	resp, err = http.Get("http://" + g.addr + "/healthz")
	if err == nil {
		require.NotEqual(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	// TLS 1.1 is refused.
	pool := x509.NewCertPool()
	pool.AddCert(first)
	_, err = tls.Dial("tcp", g.addr, &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11})
	require.Error(t, err)

	// A renewal: the files are replaced; new connections get the new
	// certificate (the files are looked at once a second at most).
	second := writeCert(t, dir, 2)
	require.Eventually(t, func() bool {
		c, err := tls.Dial("tcp", g.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the served certificate is what is checked
		if err != nil {
			return false
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(second.SerialNumber) == 0
	}, 30*time.Second, 100*time.Millisecond)
	resp, err = client(second).Get("https://" + g.addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestTLSFilesChecked: a missing file or half a pair is an error at
// start, never a plain-HTTP fallback.
func TestTLSFilesChecked(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, 1)
	for name, flags := range map[string]map[string]string{
		"a certificate without its key": {"tls-cert": filepath.Join(dir, "cert.pem")},
		"a missing key file":            {"tls-cert": filepath.Join(dir, "cert.pem"), "tls-key": filepath.Join(dir, "nope.pem")},
		"the key for the certificate":   {"tls-cert": filepath.Join(dir, "key.pem"), "tls-key": filepath.Join(dir, "key.pem")},
	} {
		t.Run(name, func(t *testing.T) {
			_, srv := busServer(t)
			flags["http"] = "127.0.0.1:0"
			_, err := build(t, t.Context(), componentForTest(), srv, flags)
			require.Error(t, err)
			require.ErrorContains(t, err, "TLS")
		})
	}
}
