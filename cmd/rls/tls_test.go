package main_test

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/hybridlimit/hybridlimit/internal/testpki"
)

// TestServerCertificates serves gRPC over mutual TLS from a certificate
// mounted as Kubernetes mounts a Secret: a client whose certificate lacks
// GRPC_CLIENT_TLS_SAN is refused; a rotated certificate is served to the
// next connection without a restart; a malformed one leaves the old one
// serving, logged and counted; a connection open throughout keeps working.
func TestServerCertificates(t *testing.T) {
	ca := testpki.NewCA(t, "mesh-ca")
	dir := filepath.Join(t.TempDir(), "certs")
	first := ca.Issue(t, "rls-1", "localhost", "127.0.0.1")
	testpki.Mount(t, dir, "1", map[string][]byte{"ca.crt": ca.PEM, "tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
	e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}),
		"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", filepath.Join(dir, "tls.crt"),
		"GRPC_SERVER_TLS_KEY", filepath.Join(dir, "tls.key"), "GRPC_CLIENT_TLS_CACERT", filepath.Join(dir, "ca.crt"),
		"GRPC_CLIENT_TLS_SAN", "envoy.gateway.svc")
	envoy := ca.Issue(t, "envoy", "envoy.gateway.svc").TLS(t)
	intruder := ca.Issue(t, "intruder", "intruder.svc").TLS(t)

	p := startUntil(t, (*proc).awaitHTTP, rlsBinary(t), e)
	conn := tlsConn(t, p.grpcAddr, ca, envoy)
	_ = p.conn.Close()
	p.conn, p.client = conn, rlspb.NewRateLimitServiceClient(conn)
	p.waitServing()
	p.mustCall(request("basic", 0, entries("key1", "a")))

	// served returns the common name of the certificate a new connection
	// is served, or the handshake's error.
	served := func(client tls.Certificate) (string, error) {
		c, err := tls.Dial("tcp", p.grpcAddr, &tls.Config{
			RootCAs: ca.Pool(), Certificates: []tls.Certificate{client}, ServerName: "localhost", NextProtos: []string{"h2"},
		})
		if err != nil {
			return "", err
		}
		defer c.Close()
		// TLS 1.3 sends the server's verdict on the client certificate
		// after the handshake: a read sees it.
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "timeout") {
			return "", err
		}
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if cn, err := served(envoy); err != nil || cn != "rls-1" {
		t.Fatalf("served %q, %v; want rls-1", cn, err)
	}
	if _, err := served(intruder); err == nil {
		t.Fatal("a client whose certificate does not name GRPC_CLIENT_TLS_SAN was let in")
	}

	second := ca.Issue(t, "rls-2", "localhost", "127.0.0.1")
	testpki.Mount(t, dir, "2", map[string][]byte{"ca.crt": ca.PEM, "tls.crt": second.CertPEM, "tls.key": second.KeyPEM})
	if cn, err := served(envoy); err != nil || cn != "rls-2" {
		t.Fatalf("after the rotation: served %q, %v; want rls-2", cn, err)
	}
	testpki.Mount(t, dir, "3", map[string][]byte{"ca.crt": ca.PEM, "tls.crt": []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), "tls.key": second.KeyPEM})
	for range 3 {
		if cn, err := served(envoy); err != nil || cn != "rls-2" {
			t.Fatalf("after a malformed certificate: served %q, %v; want rls-2, the one in use", cn, err)
		}
	}
	if got := p.metric(`hybridlimit_rls_certificate_reloads{result="error"}`); got != 1 {
		t.Errorf("reload errors counted %v, want 1", got)
	}
	if got := p.metric(`hybridlimit_rls_certificate_reloads{result="ok"}`); got != 1 {
		t.Errorf("reloads counted %v, want 1", got)
	}
	if !strings.Contains(p.out.String(), "certificate not reloaded") {
		t.Errorf("the failed reload is not logged:\n%s", p.out.String())
	}
	p.mustCall(request("basic", 0, entries("key1", "a"))) // the first connection still works
}

// tlsConn is a gRPC client connection with a client certificate.
func tlsConn(t *testing.T, addr string, ca *testpki.CA, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "localhost"})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
