package kvatlas

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	readToken  = "kvt_go_read_token_0123456789"
	writeToken = "kvt_go_write_token_9876543210"
)

// tokenFile writes a token_file (NAME:ROLE:SHA256HEX lines, docs/security.md).
func tokenFile(t *testing.T) string {
	t.Helper()
	var lines []string
	for _, tok := range []struct{ name, role, token string }{
		{"go-reader", "read", readToken}, {"go-writer", "write", writeToken}} {
		sum := sha256.Sum256([]byte(tok.token))
		lines = append(lines, tok.name+":"+tok.role+":"+hex.EncodeToString(sum[:]))
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAccessControl(t *testing.T) {
	s := startServer(t, "--token-file", tokenFile(t))
	ctx := testCtx(t)

	// No token: the server refuses the first request (Dial's ping) and closes the connection.
	if _, err := Dial(ctx, Options{Endpoints: []string{s.rpc}}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Dial without a token: %v, want unauthenticated", err)
	}
	// A token the server does not have fails Dial, with the server's reason.
	if _, err := Dial(ctx, Options{Endpoints: []string{s.rpc}, Token: "kvt_unknown"}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Dial with an unknown token: %v, want unauthenticated", err)
	}

	reader := dialT(t, Options{Endpoints: []string{s.rpc}, Token: readToken})
	if a := reader.Auth(); a.Role != RoleRead || a.Name != "go-reader" {
		t.Errorf("Auth of the read token: %+v", a)
	}
	if err := reader.Ping(ctx); err != nil {
		t.Errorf("Ping with a read token: %v", err)
	}
	_, err := reader.Ingest(ctx, []Event{storedEvent("e", seqTokens(4, 1))})
	if !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("Ingest with a read token: %v, want permission_denied", err)
	}
	// The connection stays open after permission_denied.
	if _, err := reader.Lookup(ctx, LookupRequest{Context: testContext, Tokens: seqTokens(4, 1)}); err != nil {
		t.Errorf("Lookup after a refused ingest: %v", err)
	}

	writer := dialT(t, Options{Endpoints: []string{s.rpc}, Token: writeToken})
	if _, err := writer.Ingest(ctx, []Event{storedEvent("e", seqTokens(4, 1))}); err != nil {
		t.Errorf("Ingest with a write token: %v", err)
	}
}

type testPKI struct {
	caPEM                 []byte
	caPool                *x509.CertPool
	serverCert, serverKey string // files
	caFile                string
	clientCert            tls.Certificate
	otherPool             *x509.CertPool // a CA that signed nothing here
	dir                   string
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func makeCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kvatlas-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func makePKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	ca, caKey, caPEM := makeCA(t, "kvatlas test CA")
	p.caPEM = caPEM
	p.caPool = x509.NewCertPool()
	p.caPool.AppendCertsFromPEM(caPEM)
	_, _, otherPEM := makeCA(t, "unrelated CA")
	p.otherPool = x509.NewCertPool()
	p.otherPool.AppendCertsFromPEM(otherPEM)
	srvCert, srvKey := issue(t, ca, caKey, 2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := issue(t, ca, caKey, 3, x509.ExtKeyUsageClientAuth)
	write := func(name string, b []byte) string {
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.serverCert, p.serverKey, p.caFile = write("server.pem", srvCert), write("server.key", srvKey), write("ca.pem", caPEM)
	var err error
	if p.clientCert, err = tls.X509KeyPair(cliCert, cliKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// A server with access control, TLS and client certificates (mutual TLS): the token
// travels inside TLS; a client without a certificate, or that does not trust the
// server's CA, does not get in.
func TestTLSWithTokens(t *testing.T) {
	p := makePKI(t)
	s := startServer(t, "--token-file", tokenFile(t), "--tls-cert", p.serverCert, "--tls-key", p.serverKey,
		"--tls-client-ca", p.caFile)
	ctx := testCtx(t)
	good := &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.clientCert}, MinVersion: tls.VersionTLS12}
	c := dialT(t, Options{Endpoints: []string{s.rpc}, Token: writeToken, TLS: good})
	if a := c.Auth(); a.Name != "go-writer" || a.Role != RoleWrite {
		t.Errorf("Auth over TLS: %+v", a)
	}
	if _, err := c.Ingest(ctx, []Event{storedEvent("e", seqTokens(8, 3))}); err != nil {
		t.Errorf("Ingest over TLS: %v", err)
	}
	a, err := c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: seqTokens(8, 3)})
	if err != nil || a.BlocksFound != 2 {
		t.Errorf("Lookup over TLS: %+v, %v", a, err)
	}

	untrusting := &tls.Config{RootCAs: p.otherPool, Certificates: []tls.Certificate{p.clientCert}}
	_, err = Dial(ctx, Options{Endpoints: []string{s.rpc}, Token: writeToken, TLS: untrusting})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "TLS handshake") {
		t.Errorf("Dial not trusting the server's CA: %v, want unavailable naming the TLS handshake", err)
	}
	noCert := &tls.Config{RootCAs: p.caPool}
	if _, err = Dial(ctx, Options{Endpoints: []string{s.rpc}, Token: writeToken, TLS: noCert}); err == nil {
		t.Errorf("Dial without a client certificate succeeded on a server that requires one")
	}
	for _, token := range []string{writeToken, ""} {
		if _, err = Dial(ctx, Options{Endpoints: []string{s.rpc}, Token: token}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Dial in plaintext to a TLS server (token %q): %v, want unavailable", token, err)
		}
	}
}
