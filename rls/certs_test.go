package rls

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/testpki"
)

// TestKeyPairReload rotates a certificate as Kubernetes does and checks
// that the next handshake gets the new one; a malformed one leaves the old
// pair in use, logged and counted once.
func TestKeyPairReload(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	a, b := ca.Issue(t, "a", "a.example"), ca.Issue(t, "b", "b.example")
	dir := t.TempDir()
	testpki.Mount(t, dir, "1", map[string][]byte{"tls.crt": a.CertPEM, "tls.key": a.KeyPEM})
	var logs bytes.Buffer
	var counts certCounters
	kp, err := newKeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), slog.New(slog.NewTextHandler(&logs, nil)), &counts)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func() string {
		c := kp.get()
		return c.Leaf.Subject.CommonName
	}
	if got := leaf(); got != "a" {
		t.Fatalf("first pair: %q, want a", got)
	}
	testpki.Mount(t, dir, "2", map[string][]byte{"tls.crt": b.CertPEM, "tls.key": b.KeyPEM})
	if got := leaf(); got != "b" || counts.reloads.Load() != 1 {
		t.Fatalf("after the rotation: %q (%d reloads), want b (1)", got, counts.reloads.Load())
	}
	testpki.Mount(t, dir, "3", map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": b.KeyPEM})
	for range 3 {
		if got := leaf(); got != "b" {
			t.Fatalf("after a malformed certificate: %q, want b, the pair in use", got)
		}
	}
	if counts.errors.Load() != 1 || strings.Count(logs.String(), "certificate not reloaded") != 1 {
		t.Fatalf("malformed certificate: %d errors counted, logs:\n%s\nwant 1 and one line", counts.errors.Load(), logs.String())
	}
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	if got := leaf(); got != "b" || counts.errors.Load() != 2 {
		t.Fatalf("missing key: %q, %d errors, want b and 2", got, counts.errors.Load())
	}
	if _, err := newKeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), slog.New(slog.DiscardHandler), &counts); err == nil {
		t.Fatal("newKeyPair on a malformed pair: no error")
	}
}
