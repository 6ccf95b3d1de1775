package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The tests run in parallel, each with services of its own, most of its
// time theirs to answer; but for those that check for leaked goroutines
// (redistest.NoLeaks), which would count the others'; those on the shared
// cluster, one of which stops a master of it; and those that hold a
// service or a key to a second or less of wall-clock time (TLS, xDS, the
// per-second Redis's one-second keys), which a machine busy with the
// others can miss.

// binDir holds the binaries the tests build, removed by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rls-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	defer os.RemoveAll(dir)
	redistest.Main(m)
}

// build is a binary built once for the test binary.
type build struct {
	once sync.Once
	path string
	err  error
}

// get builds pkg, from the module in dir, into binDir/name on first use,
// with the extra environment env and build flags.
func (b *build) get(t *testing.T, name, dir, pkg string, env []string, flags ...string) string {
	t.Helper()
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		abs, err := filepath.Abs(dir)
		if err != nil {
			b.err = err
			return
		}
		cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", b.path, pkg)...)
		cmd.Dir = abs
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var ours, static build

// rlsBinary builds cmd/rls once for the test binary, with the race
// detector when the test binary has it: the service's races fail its
// tests too, and the build reuses the packages the test binary was built
// from, where any other flags would compile the service's whole tree again.
func rlsBinary(t *testing.T) string {
	if raceBuild {
		return ours.get(t, "rls", ".", ".", nil, "-race")
	}
	return ours.get(t, "rls", ".", ".", nil)
}

// staticBinary builds cmd/rls once for the test binary as the container
// image ships it: static (CGO_ENABLED=0), without the race detector.
func staticBinary(t *testing.T) string {
	return static.get(t, "rls-static", ".", ".", []string{"CGO_ENABLED=0"}, "-trimpath")
}

// proc is a rate limit service running as a subprocess: ours or the
// reference.
type proc struct {
	t                 *testing.T
	cmd               *exec.Cmd
	grpcAddr, httpURL string
	debugURL          string
	out               *lockedBuffer
	conn              *grpc.ClientConn
	client            rlspb.RateLimitServiceClient
	done              chan struct{}
	stopped           sync.Once
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs bin with env (and nothing else of the test's environment but
// PATH and HOME) on free loopback ports, waits until its gRPC health check
// says SERVING (the reference's ready moment), and stops it when the test
// ends. A port freePort found free can be taken before the service binds it (by
// another test's process, or an outgoing connection's ephemeral port): the
// service then exits at once, and start tries other ports, twice at most.
func start(t *testing.T, bin string, env map[string]string, args ...string) *proc {
	t.Helper()
	return startUntil(t, (*proc).awaitServing, bin, env, args...)
}

// startUntil is start with another moment to wait for: await returns once
// the process reaches it, or why it did not.
func startUntil(t *testing.T, await func(*proc) error, bin string, env map[string]string, args ...string) *proc {
	t.Helper()
	for tries := 1; ; tries++ {
		p := launchIn(t, "", 0, bin, env, args...)
		err := await(p)
		if err == nil {
			return p
		}
		if tries == 3 || !strings.Contains(p.out.String(), "address already in use") {
			t.Fatal(err)
		}
	}
}

// launchIn starts bin as start does, without waiting for it, chrooted
// into root as user uid when root is not "" (bin is then a path in root).
func launchIn(t *testing.T, root string, uid uint32, bin string, env map[string]string, args ...string) *proc {
	t.Helper()
	ports := [3]int{freePort(t), freePort(t), freePort(t)}
	base := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
		"HOST": "127.0.0.1", "GRPC_HOST": "127.0.0.1", "DEBUG_HOST": "127.0.0.1",
		"PORT": strconv.Itoa(ports[0]), "GRPC_PORT": strconv.Itoa(ports[1]), "DEBUG_PORT": strconv.Itoa(ports[2]),
		"LOG_LEVEL": "info", "USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp",
	}
	for k, v := range env {
		base[k] = v
	}
	var environ []string
	for k, v := range base {
		environ = append(environ, k+"="+v)
	}
	p := &proc{
		t: t, out: &lockedBuffer{}, done: make(chan struct{}),
		grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
		httpURL:  "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		debugURL: "http://127.0.0.1:" + strconv.Itoa(ports[2]),
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if root != "" {
		p.cmd.Dir = "/"
		p.cmd.SysProcAttr.Chroot = root
		p.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	// Retry the first connection every 20 ms, not after gRPC's default
	// second of backoff: the service is starting.
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.2, MaxDelay: 100 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.client = conn, rlspb.NewRateLimitServiceClient(conn)
	return p
}

// waitServing waits until the gRPC health check says SERVING, for 20 s.
func (p *proc) waitServing() {
	p.t.Helper()
	if err := p.awaitServing(); err != nil {
		p.t.Fatal(err)
	}
}

// awaitServing is waitServing returning its failure.
func (p *proc) awaitServing() error {
	hc := healthpb.NewHealthClient(p.conn)
	return p.await("serving", func() (bool, any) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING, fmt.Sprint(r, " ", err)
	})
}

// awaitHTTP waits, for 20 s, until the process answers on its HTTP port,
// whatever the status: a service with no rules loaded listens but fails
// its health check. The service binds every port before it serves on any,
// so an answer says that none was taken.
func (p *proc) awaitHTTP() error {
	return p.await("listening", func() (bool, any) {
		resp, err := http.Get(p.httpURL + "/healthcheck")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
}

// await polls ready every 20 ms, for 20 s, until it reports the process
// is what (with what it saw last), and fails early, with the process's
// output, if the process exits.
func (p *proc) await(what string, ready func() (bool, any)) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := ready()
		if ok {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s (%v):\n%s", p.cmd.Path, what, p.cmd.ProcessState, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not %s after 20s (last: %v):\n%s", p.cmd.Path, what, last, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM, as Kubernetes does, and kills it if
// it has not exited within 10 seconds. A race the service's race detector
// reported fails the test: such a service goes on serving, and the exit
// status it ends with is nobody's to read.
func (p *proc) stop() {
	p.stopped.Do(func() {
		if p.conn != nil {
			_ = p.conn.Close()
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			p.t.Errorf("the service did not exit within 10s of SIGTERM:\n%s", p.out.String())
		}
		if out := p.out.String(); strings.Contains(out, "WARNING: DATA RACE") {
			p.t.Errorf("the race detector reported in %s:\n%s", p.cmd.Path, out)
		}
	})
}

// call sends one request as Envoy's filter does, bounded by 5 s.
func (p *proc) call(req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.client.ShouldRateLimit(ctx, req)
}

func (p *proc) mustCall(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	p.t.Helper()
	r, err := p.call(req)
	if err != nil {
		p.t.Fatalf("ShouldRateLimit(%v): %v\n%s", req, err, p.out.String())
	}
	return r
}

func (p *proc) get(url string) (int, string) {
	p.t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		p.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stat returns a counter of /stats by its reference name.
func (p *proc) stat(name string) int64 {
	p.t.Helper()
	_, body := p.get(p.debugURL + "/stats")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// metric returns the sum of a metric's series on the debug port's
// /metrics, 0 when it has none.
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	_, body := p.get(p.debugURL + "/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			p.t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// waitFor polls cond every 20ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// request builds a RateLimitRequest: each descriptor a list of key, value
// pairs.
func request(domain string, hits uint32, descriptors ...[][2]string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		desc := &rlpb.RateLimitDescriptor{}
		for _, e := range d {
			desc.Entries = append(desc.Entries, &rlpb.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

func entries(kv ...string) [][2]string {
	var out [][2]string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, [2]string{kv[i], kv[i+1]})
	}
	return out
}

// runtimeDir makes RUNTIME_ROOT/config with the given files.
func runtimeDir(t *testing.T, files map[string]string) (root string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "current")
	writeFiles(t, filepath.Join(root, "config"), files)
	return root
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		writeAtomic(t, filepath.Join(dir, name), text)
	}
}

// writeAtomic replaces a file as editors and deploy tools do: write a
// temporary file, rename it over the old one.
func writeAtomic(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// statusOf summarizes a status for comparisons and failure messages.
func statusOf(s *rlspb.RateLimitResponse_DescriptorStatus) string {
	b, _ := json.Marshal(map[string]any{
		"code": s.GetCode().String(), "limit": s.GetCurrentLimit().GetRequestsPerUnit(),
		"unit": s.GetCurrentLimit().GetUnit().String(), "remaining": s.GetLimitRemaining(),
	})
	return string(b)
}
