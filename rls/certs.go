package rls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// certCounters count the reloads of certificate files.
type certCounters struct {
	reloads, errors atomic.Uint64
}

// keyPair is a certificate and its key read from files, and read again when
// either file changes: Kubernetes rotates a mounted Secret by swapping a
// symbolic link, and the first TLS handshake after that gets the new pair.
// A pair that cannot be read (a file missing or malformed, a key that does
// not match) leaves the last good one in use; the failure is logged and
// counted once per change of the files. get looks at the files (two stats)
// on every handshake, which TLS connections, long-lived, make rarely; it
// holds no lock, and one caller at a time reads a changed pair while the
// others go on with the pair in use. A keyPair is safe for concurrent use.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger
	counters          *certCounters
	cur               atomic.Pointer[pairState]
	loading           atomic.Bool
}

// pairState is a pair in use and the files as last looked at.
type pairState struct {
	cert  *tls.Certificate
	files [2]os.FileInfo // nil for a file that could not be looked at
}

// newKeyPair reads the pair, or says why it cannot.
func newKeyPair(certFile, keyFile string, log *slog.Logger, counters *certCounters) (*keyPair, error) {
	k := &keyPair{certFile: certFile, keyFile: keyFile, log: log, counters: counters}
	files := k.stat()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	k.cur.Store(&pairState{cert: &cert, files: files})
	return k, nil
}

func (k *keyPair) stat() [2]os.FileInfo {
	var out [2]os.FileInfo
	for i, p := range []string{k.certFile, k.keyFile} {
		if st, err := os.Stat(p); err == nil {
			out[i] = st
		}
	}
	return out
}

// same reports whether two looks at a file saw the same file, unchanged.
func same(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// get returns the pair to use now, read again first if its files changed.
func (k *keyPair) get() *tls.Certificate {
	st := k.cur.Load()
	files := k.stat()
	if same(files[0], st.files[0]) && same(files[1], st.files[1]) || !k.loading.CompareAndSwap(false, true) {
		return st.cert
	}
	defer k.loading.Store(false)
	st = k.cur.Load()
	next := &pairState{cert: st.cert, files: files}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		k.counters.errors.Add(1)
		k.log.Error("rls: certificate not reloaded; the one in use stays", "cert", k.certFile, "key", k.keyFile, "err", err)
	} else {
		next.cert = &cert
		k.counters.reloads.Add(1)
		k.log.Info("rls: certificate reloaded", "cert", k.certFile, "key", k.keyFile)
	}
	k.cur.Store(next)
	return next.cert
}

// requireSAN accepts a client whose verified certificate names san
// (GRPC_CLIENT_TLS_SAN): a DNS name or an IP address, checked as a host
// name is, or a URI such as a SPIFFE id, in full.
func requireSAN(san string) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return errors.New("rls: no verified client certificate to check GRPC_CLIENT_TLS_SAN against")
		}
		leaf := chains[0][0]
		if leaf.VerifyHostname(san) == nil {
			return nil
		}
		for _, u := range leaf.URIs {
			if u.String() == san {
				return nil
			}
		}
		return fmt.Errorf("rls: the client certificate does not name %q (GRPC_CLIENT_TLS_SAN)", san)
	}
}

func certPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
