package main_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// RequireImageEnv turns a machine that cannot build or run the image
// (neither podman nor buildah, or not root) from a skip into a failure.
const RequireImageEnv = "HYBRIDLIMIT_REQUIRE_IMAGE"

// cannotImage skips the test, or fails it under HYBRIDLIMIT_REQUIRE_IMAGE=1.
func cannotImage(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(RequireImageEnv) == "1" {
		t.Fatalf("%s (%s=1)", why, RequireImageEnv)
	}
	t.Skipf("%s; `make image-test` installs podman and runs this test", why)
}

// TestImage builds the container image with `make image`, takes its
// filesystem and configuration out of an OCI archive of it, checks that it
// holds the binary at /bin/ratelimit, the CA bundle and nothing else, and
// that it runs as user 65534, then runs its entrypoint chrooted into that
// filesystem as user 65534, which can write nowhere in it (so a read-only
// root filesystem serves as well), against a real redis-server, over gRPC.
func TestImage(t *testing.T) {
	t.Parallel()
	tool := ""
	for _, c := range []string{"podman", "buildah"} {
		if _, err := exec.LookPath(c); err == nil {
			tool = c
			break
		}
	}
	if tool == "" {
		cannotImage(t, "neither podman nor buildah is installed")
	}
	if os.Geteuid() != 0 {
		cannotImage(t, "running the entrypoint in the image's filesystem as user 65534 needs root (chroot, setuid)")
	}
	bin := staticBinary(t)
	image := fmt.Sprintf("localhost/hybridlimit/rls:test-%d", os.Getpid())
	built := time.Now()
	mk := exec.Command("make", "-C", "../..", "image", "IMAGE="+image, "RLS_BINARY="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(tool, "--storage-driver", "vfs", "rmi", "-f", image).Run() })
	archive := filepath.Join(t.TempDir(), "image.tar")
	save := exec.Command(tool, "--storage-driver", "vfs", "push", image, "oci-archive:"+archive)
	if tool == "podman" {
		save = exec.Command(tool, "--storage-driver", "vfs", "save", "--format", "oci-archive", "-o", archive, image)
	}
	if out, err := save.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", save.Args, err, out)
	}
	t.Logf("make image and the archive took %v (%s)", time.Since(built).Round(time.Millisecond), tool)

	root := filepath.Join(t.TempDir(), "rootfs")
	cfg, files := unpackOCI(t, archive, root)
	if cfg.Config.User != "65534:65534" || strings.Join(cfg.Config.Entrypoint, " ") != "/bin/ratelimit" {
		t.Fatalf("image config: user %q, entrypoint %q; want 65534:65534 and /bin/ratelimit", cfg.Config.User, cfg.Config.Entrypoint)
	}
	if want := []string{"bin/ratelimit", "etc/ssl/certs/ca-certificates.crt"}; strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("the image's files: %q, want %q", files, want)
	}
	st, err := os.Stat(filepath.Join(root, "bin", "ratelimit"))
	if err != nil || st.Mode()&0o001 == 0 {
		t.Fatalf("/bin/ratelimit: %v, mode %v: want it executable by any user", err, st.Mode())
	}

	// The rules, where Istio's sample mounts them, readable by the
	// service and, like everything else here, not writable by it.
	rules := filepath.Join(root, "data", "ratelimit", "config")
	writeFiles(t, rules, map[string]string{"basic.yaml": basicYAML})
	for d := rules; d != filepath.Dir(root); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(rules, "basic.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	redis := redistest.StandaloneServer(t)
	e := map[string]string{
		"REDIS_URL": redis.Addr, "CACHE_KEY_PREFIX": redistest.Prefix(t), "RUNTIME_ROOT": "/data",
		"RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "HYBRIDLIMIT_MAX_WAIT": "2s",
		"LOG_FORMAT": "json",
	}
	p := launchIn(t, root, 65534, "/bin/ratelimit", e)
	p.waitServing()
	for i := 19; i >= 17; i-- {
		r := p.mustCall(request("basic", 0, entries("key1", "image")))
		if got := r.Statuses[0].GetLimitRemaining(); got != uint32(i) {
			t.Fatalf("call %d: limit_remaining %d, want %d (20 a minute)", 20-i, got, i)
		}
	}
	if code, body := p.get(p.httpURL + "/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck = %d %q", code, body)
	}
}

// ociConfig is the part of an OCI image configuration the test reads.
type ociConfig struct {
	Config struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
	} `json:"config"`
}

// unpackOCI unpacks the one image of an OCI archive into root: its
// layers in order (whiteouts are not expected in an image FROM scratch).
// It returns the image's configuration and the regular files it holds,
// sorted.
func unpackOCI(t *testing.T, archive, root string) (ociConfig, []string) {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			blobs[path.Clean(h.Name)] = b
		}
	}
	blob := func(digest string) []byte {
		b, ok := blobs["blobs/"+strings.Replace(digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("archive lacks blob %s", digest)
		}
		return b
	}
	type descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var cfg ociConfig
	if err := json.Unmarshal(blob(manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, l := range manifest.Layers {
		var r io.Reader = strings.NewReader(string(blob(l.Digest)))
		if strings.HasSuffix(l.MediaType, "gzip") {
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		lt := tar.NewReader(r)
		for {
			h, err := lt.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := path.Clean(strings.TrimPrefix(h.Name, "/"))
			if strings.HasPrefix(name, "..") || strings.HasPrefix(path.Base(name), ".wh.") {
				t.Fatalf("layer entry %q: not expected in this image", h.Name)
			}
			dst := filepath.Join(root, filepath.FromSlash(name))
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(dst, 0o755); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(lt)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, os.FileMode(h.Mode)&0o7777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dst, os.FileMode(h.Mode)&0o7777); err != nil {
					t.Fatal(err)
				}
				files = append(files, name)
			default:
				t.Fatalf("layer entry %q of type %c: not expected in this image", h.Name, h.Typeflag)
			}
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return cfg, files
}
