// Package redistest starts real redis-server processes for tests: a
// standalone server and a 3-master + 3-replica cluster on free loopback
// ports, each in a temporary directory of its own. It never connects to a
// server it did not start.
//
// HYBRIDLIMIT_SERVER=valkey starts valkey-server (and builds clusters with
// valkey-cli) instead, so that the same suites run against Valkey, which
// most managed offerings and distributions now ship in Redis's place.
//
// Without the server on PATH, tests that ask for one are skipped with a
// message saying how to install it, unless HYBRIDLIMIT_REQUIRE_REDIS=1,
// when they fail.
//
// A test binary shares one standalone server and one cluster among its
// tests, started on first use; call Main from TestMain so they are stopped
// when the tests end. Tests keep apart by key prefix (see Prefix), never by
// flushing.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// RequireEnv is the variable that turns a missing redis-server from a skip
// into a failure.
const RequireEnv = "HYBRIDLIMIT_REQUIRE_REDIS"

// ServerEnv is the variable that chooses the server the tests start:
// "redis" (or unset) for redis-server, "valkey" for valkey-server.
const ServerEnv = "HYBRIDLIMIT_SERVER"

// Kind returns the server the tests start, as ServerEnv names it, and the
// names of its server and command-line binaries.
func Kind() (kind, server, cli string, err error) {
	switch kind = os.Getenv(ServerEnv); kind {
	case "", "redis":
		return "redis", "redis-server", "redis-cli", nil
	case "valkey":
		return kind, "valkey-server", "valkey-cli", nil
	}
	return "", "", "", fmt.Errorf("%s=%q: want redis or valkey", ServerEnv, kind)
}

// shared holds the servers a test binary shares. It is test-only state,
// started lazily and stopped by Main.
var shared struct {
	mu         sync.Mutex
	standalone *Server
	cluster    *ClusterServers
	err        error
	clusterErr error
	started    []*Server

	// ports are the ports freePort handed out, each with its cluster bus
	// port, under their own lock: start runs under mu.
	portsMu sync.Mutex
	ports   map[int]bool
}

// Main removes what crashed runs left, runs the tests, stops every server
// this package started, and exits.
func Main(m *testing.M) {
	sweepDirs(os.TempDir())
	code := m.Run()
	shared.mu.Lock()
	for _, s := range shared.started {
		s.Stop()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// dirPrefix and the test binary's pid start each server's directory name,
// so that a later run can tell the directories of a binary that died
// without cleaning up (a panic, a -timeout) from those of one running.
const dirPrefix = "redistest-"

// sweepDirs removes the server directories in tmp of test binaries that are
// no longer running. Their servers died with them (Pdeathsig).
func sweepDirs(tmp string) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		pidText, _, found := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !found || err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

func requireBinary(tb testing.TB) {
	tb.Helper()
	_, server, _, err := Kind()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if _, err := exec.LookPath(server); err != nil {
		hint := fmt.Sprintf("%s is not on PATH; install it (Debian: apt-get install -y %s) or run `make test`, which does", server, server)
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("%s (%s=1)", hint, RequireEnv)
		}
		tb.Skip(hint)
	}
}

// Server is one redis-server process started by this package.
type Server struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	once sync.Once
}

// Stop kills the server and removes its directory. It is safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGCONT) // in case a test stopped it
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		_ = os.RemoveAll(s.Dir)
	})
}

// Signal sends sig to the server process (SIGSTOP, SIGCONT, SIGKILL for fault tests).
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Client returns a new client to the server, closed when the test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a dedicated redis-server for one test, with extra config
// directives such as "maxmemory 1mb", stopped when the test ends.
func Start(tb testing.TB, directives ...string) *Server {
	tb.Helper()
	requireBinary(tb)
	s, err := start(directives...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(directives ...string) (*Server, error) {
	var lastErr error
	for range 5 { // a free port can be taken between probe and bind
		s, err := startOnce(directives)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(directives []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	conf := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"save \"\"",
		"appendonly no",
		"daemonize no",
		"protected-mode no",
		"loglevel warning",
		"logfile " + filepath.Join(dir, "redis.log"),
		// A replica's first sync starts at once: by default a master
		// waits 5 s for more replicas to share one transfer, which made
		// most of a cluster's start-up.
		"repl-diskless-sync-delay 0",
	}
	conf = append(conf, directives...)
	path := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	_, server, _, err := Kind()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(server, path)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", server, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, cmd: cmd}
	if err := waitReady(s.Addr, 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		s.Stop()
		return nil, fmt.Errorf("%s on %s: %w; log: %s", server, s.Addr, err, log)
	}
	return s, nil
}

// freePort returns a loopback port free now that this test binary has not
// handed out before, as a server's port or its cluster bus port (the port
// + 10000). A cluster keeps the addresses of the nodes it lost (a master
// a test killed) and calls them, and Redis Cluster can merge two clusters
// when a node of one takes the address of a failed node of the other
// (redis/redis issues 7287 and 5234): fleet tests run their clusters side
// by side, and a new one of them can count 11 known nodes instead of its 6.
func freePort() (int, error) {
	shared.portsMu.Lock()
	defer shared.portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 || shared.ports[port] || shared.ports[port+10000] {
			continue
		}
		if shared.ports == nil {
			shared.ports = make(map[int]bool)
		}
		shared.ports[port], shared.ports[port+10000] = true, true
		return port, nil
	}
	return 0, errors.New("no free port below 55536 that no server of this test binary had")
}

func waitReady(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func track(s *Server) {
	shared.started = append(shared.started, s)
}

// StandaloneServer returns the standalone server shared by the test binary.
func StandaloneServer(tb testing.TB) *Server {
	tb.Helper()
	requireBinary(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.standalone == nil && shared.err == nil {
		shared.standalone, shared.err = start()
		if shared.err == nil {
			track(shared.standalone)
		}
	}
	if shared.err != nil {
		tb.Fatalf("redistest: %v", shared.err)
	}
	return shared.standalone
}

// Standalone returns a new client to the shared standalone server, closed
// when the test ends.
func Standalone(tb testing.TB) *redis.Client {
	tb.Helper()
	return StandaloneServer(tb).Client(tb)
}

// ClusterServers is a 3-master + 3-replica Redis Cluster.
type ClusterServers struct {
	Nodes []*Server
}

// Addrs returns the address of every node, masters and replicas.
func (c *ClusterServers) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Client returns a new cluster client, closed when the test ends.
func (c *ClusterServers) Client(tb testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// ClusterOf returns the 3+3 cluster shared by the test binary, started on
// first use with `redis-cli --cluster create`.
func ClusterOf(tb testing.TB) *ClusterServers {
	tb.Helper()
	requireBinary(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster == nil && shared.clusterErr == nil {
		shared.cluster, shared.clusterErr = startCluster()
	}
	if shared.clusterErr != nil {
		tb.Fatalf("redistest: %v", shared.clusterErr)
	}
	return shared.cluster
}

// Cluster returns a new client to the shared cluster, closed when the test ends.
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	return ClusterOf(tb).Client(tb)
}

// NewCluster starts a dedicated 3+3 cluster for one test (failover tests
// that must not disturb the shared one), stopped when the test ends.
func NewCluster(tb testing.TB) *ClusterServers {
	tb.Helper()
	return NewClusterWith(tb)
}

// NewClusterWith is NewCluster with extra config directives for every
// node, after the defaults, so they override them: failover tests use
// "cluster-node-timeout 500" to have a replica take over within a second
// or so of its master's death.
func NewClusterWith(tb testing.TB, directives ...string) *ClusterServers {
	tb.Helper()
	requireBinary(tb)
	c, err := startClusterNodes(directives...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Stop()
		}
	})
	return c
}

func startCluster() (*ClusterServers, error) {
	c, err := startClusterNodes()
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		track(n)
	}
	return c, nil
}

func startClusterNodes(directives ...string) (*ClusterServers, error) {
	_, server, cli, err := Kind()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(cli); err != nil {
		return nil, fmt.Errorf("%s is not on PATH (it comes with %s)", cli, server)
	}
	c := &ClusterServers{}
	fail := func(err error) (*ClusterServers, error) {
		for _, n := range c.Nodes {
			n.Stop()
		}
		return nil, err
	}
	for range 6 {
		conf := append([]string{"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000"}, directives...)
		n, err := start(conf...)
		if err != nil {
			return fail(err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("%s --cluster create: %w: %s", cli, err, out))
	}
	if err := waitClusterOK(c, 30*time.Second); err != nil {
		return fail(err)
	}
	return c, nil
}

// waitClusterOK waits until every node reports cluster_state:ok, knows
// all six nodes and every one's role, and every replica has finished its
// initial sync.
func waitClusterOK(c *ClusterServers, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := cl.ClusterInfo(ctx).Result()
			repl, rerr := cl.Info(ctx, "replication").Result()
			nodes, nerr := cl.ClusterNodes(ctx).Result()
			cancel()
			if err == nil && rerr == nil && nerr == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:6") && replicaReady(repl) && seesEveryRole(nodes) {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				return fmt.Errorf("cluster not ready on %s: %v %q", n.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return nil
}

// seesEveryRole reports whether a node's CLUSTER NODES lists three
// masters serving slots and three replicas of a master, none failing or
// in handshake: the gossip of who replicates whom lags the cluster state,
// and a test that asks for a slot's replicas reads this view.
func seesEveryRole(nodes string) bool {
	masters, replicas := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") {
			return false
		}
		switch {
		case strings.Contains(f[2], "master") && len(f) > 8:
			masters++
		case strings.Contains(f[2], "slave") && f[3] != "-":
			replicas++
		}
	}
	return masters == 3 && replicas == 3
}

func replicaReady(info string) bool {
	if !strings.Contains(info, "role:slave") {
		return true
	}
	return strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1")
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Prefix returns a key prefix unique to this test and this run, such as
// "t:TestAllow_1:a1b2c3:", so tests sharing a server never see each other's keys.
func Prefix(tb testing.TB) string {
	var r [3]byte
	_, _ = rand.Read(r[:])
	name := unsafeChars.ReplaceAllString(tb.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t:" + name + ":" + hex.EncodeToString(r[:]) + ":"
}

// KeysWithoutTTL scans every master reachable through c for keys matching
// prefix+"*" that have no TTL, and returns them with the total number of keys
// seen. Tests assert the first is empty and the second is not zero.
func KeysWithoutTTL(tb testing.TB, c redis.UniversalClient, prefix string) (noTTL []string, seen int) {
	tb.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	scan := func(ctx context.Context, node *redis.Client) error {
		it := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			key := it.Val()
			ttl, err := node.PTTL(ctx, key).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			seen++
			if ttl == -1 {
				noTTL = append(noTTL, key)
			}
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, cc)
	default:
		tb.Fatalf("redistest: KeysWithoutTTL: unsupported client %T", c)
	}
	if err != nil {
		tb.Fatalf("redistest: scan: %v", err)
	}
	return noTTL, seen
}

// LogTail returns the last lines of a server's log, for failure messages.
func (s *Server) LogTail(n int) string {
	f, err := os.Open(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// NoLeaks fails the test if it leaves goroutines behind. Call it first in
// the test: cleanups run last-in first-out, so the check runs after every
// later cleanup (limiters closed, clients closed).
func NoLeaks(tb testing.TB) {
	tb.Helper()
	opt := goleak.IgnoreCurrent()
	tb.Cleanup(func() { goleak.VerifyNone(tb, opt) })
}
