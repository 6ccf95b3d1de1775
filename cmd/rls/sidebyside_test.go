package main_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

var (
	sideBySide = flag.String("rls.sidebyside", "", "run the side-by-side benchmark and write its figures into this file (docs/rls.md)")
	sbDuration = flag.Duration("rls.sidebyside.duration", 10*time.Second, "how long the side-by-side benchmark loads each service")
)

const benchYAML = `domain: bench
descriptors:
  - key: hot
    rate_limit:
      unit: second
      requests_per_unit: 1000
  - key: cold
    rate_limit:
      unit: second
      requests_per_unit: 100
`

// loadResult is what one service did under the side-by-side load.
type loadResult struct {
	name             string
	requests, errors int
	coldRequests     int
	coldDenied       int // cold requests refused: none is over its limit
	seconds          float64
	p50, p99         time.Duration
	commands         int64 // Redis commands executed, a script's own calls included
	scripts          int64 // of which script calls (EVALSHA, EVAL)
	plain            int64 // commands no script issues (GET, SCRIPT LOAD, ...)
	byCommand        map[string]int64
	redisCPU         float64 // seconds of CPU the Redis server used, user and system
	messages         float64 // hybrid mode: key messages the limiter sent (hybridlimit_sync_key_messages_total)
	worstWindow      int     // the most hot admissions in any 1 s window
	worstSaturated   int     // the same from 2 s into the run, once the bucket is drained
}

// TestSideBySide loads the reference and this service (each mode, and the
// default mode at a shorter sync interval) in turn on one dedicated Redis:
// 8 gRPC clients, each request one descriptor, half on one hot rule
// (1000/s, saturated), half on 1,000 cold values (100/s each). It measures
// requests/s, latency, Redis commands and CPU per request (INFO
// commandstats, INFO cpu) and the most the hot rule admitted in any
// one-second window, and writes them into the file -rls.sidebyside names.
// It runs only when asked: make rls-bench.
func TestSideBySide(t *testing.T) {
	if *sideBySide == "" {
		t.Skip("the side-by-side benchmark runs with -rls.sidebyside=docs/rls.md (make rls-bench)")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// The reference's runtime layout: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
	root := filepath.Join(t.TempDir(), "current")
	writeFiles(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"bench.yaml": benchYAML})
	common := map[string]string{"REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"LOG_LEVEL": "warn", "REDIS_POOL_SIZE": "16"}
	with := func(extra ...string) map[string]string {
		e := map[string]string{}
		for k, v := range common {
			e[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			e[extra[i]] = extra[i+1]
		}
		return e
	}
	runs := []struct {
		name   string
		bin    string
		env    map[string]string
		hybrid bool
	}{
		{"reference (envoyproxy/ratelimit)", referenceBinary(t), with("CACHE_KEY_PREFIX", "ref:"), false},
		{"hybridlimit rls, default (hybrid)", rlsBinary(t), with("CACHE_KEY_PREFIX", "hl:"), true},
		{"hybridlimit rls, fixed_window", rlsBinary(t), with("CACHE_KEY_PREFIX", "fw:", "HYBRIDLIMIT_MODE", "fixed_window"), false},
		// The saturated rule's worst window follows the sync interval.
		{"hybridlimit rls, hybrid, HYBRIDLIMIT_SYNC_INTERVAL=100ms", rlsBinary(t), with("CACHE_KEY_PREFIX", "hl100:", "HYBRIDLIMIT_SYNC_INTERVAL", "100ms"), true},
		// Hits over the limit charged: the saturated rule stays in debt.
		{"hybridlimit rls, hybrid, HYBRIDLIMIT_COUNT_EVERY_HIT=true", rlsBinary(t), with("CACHE_KEY_PREFIX", "hlall:", "HYBRIDLIMIT_COUNT_EVERY_HIT", "true"), true},
	}
	var results []loadResult
	for _, run := range runs {
		p := start(t, run.bin, run.env)
		time.Sleep(500 * time.Millisecond)
		if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		cpu0, messages0 := redisCPU(t, rdb), 0.0
		if run.hybrid {
			messages0 = p.metric("hybridlimit_sync_key_messages_total")
		}
		r := load(t, p, *sbDuration)
		r.name = run.name
		r.commands, r.scripts, r.plain, r.byCommand = commandCounts(t, rdb)
		r.redisCPU = redisCPU(t, rdb) - cpu0
		if run.hybrid {
			r.messages = p.metric("hybridlimit_sync_key_messages_total") - messages0
		}
		p.stop()
		results = append(results, r)
		t.Logf("%+v", r)
	}
	if err := writeSection(*sideBySide, report(results, srv)); err != nil {
		t.Fatal(err)
	}
}

// sent is the commands clients sent: scripts count once, the calls they
// make inside Redis not at all. The reference sends plain commands only.
func (r loadResult) sent() int64 {
	if r.scripts == 0 {
		return r.commands
	}
	return r.scripts + r.plain
}

// load runs 8 clients against p for d and measures what they saw.
func load(t *testing.T, p *proc, d time.Duration) loadResult {
	const clients, cold = 8, 1000
	var (
		mu       sync.Mutex
		lat      []time.Duration
		hotTimes []time.Time
		errs     int
		coldNo   int
		coldN    int
		wg       sync.WaitGroup
	)
	startAt := time.Now()
	end := startAt.Add(d)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			client := rlspb.NewRateLimitServiceClient(conn)
			var myLat []time.Duration
			var myHot []time.Time
			myErrs, myCold, myColdNo := 0, 0, 0
			for i := 0; time.Now().Before(end); i++ {
				req := request("bench", 0, entries("hot", "h"))
				hot := i%2 == 0
				if !hot {
					req = request("bench", 0, entries("cold", strconv.Itoa((i*clients+c)%cold)))
					myCold++
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				t0 := time.Now()
				r, err := client.ShouldRateLimit(ctx, req)
				now := time.Now()
				cancel()
				myLat = append(myLat, now.Sub(t0))
				switch {
				case err != nil:
					myErrs++
				case hot && r.OverallCode == rlspb.RateLimitResponse_OK:
					myHot = append(myHot, now)
				case !hot && r.OverallCode != rlspb.RateLimitResponse_OK:
					myColdNo++
				}
			}
			mu.Lock()
			lat = append(lat, myLat...)
			hotTimes = append(hotTimes, myHot...)
			errs += myErrs
			coldNo += myColdNo
			coldN += myCold
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(startAt).Seconds()
	slices.Sort(lat)
	slices.SortFunc(hotTimes, func(a, b time.Time) int { return a.Compare(b) })
	worst, saturated := 0, 0
	for i, j := 0, 0; j < len(hotTimes); j++ {
		for hotTimes[j].Sub(hotTimes[i]) >= time.Second {
			i++
		}
		worst = max(worst, j-i+1)
		if hotTimes[i].Sub(startAt) >= 2*time.Second {
			saturated = max(saturated, j-i+1)
		}
	}
	q := func(f float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(f*float64(len(lat))))]
	}
	return loadResult{requests: len(lat), errors: errs, coldRequests: coldN, coldDenied: coldNo, seconds: elapsed, p50: q(0.5), p99: q(0.99), worstWindow: worst, worstSaturated: saturated}
}

// commandCounts reads INFO commandstats: every command executed (a
// script's calls included) but the benchmark's own INFO and CONFIG and the
// health checks' PING, and the script calls among them.
func commandCounts(t *testing.T, rdb *redis.Client) (all, scripts, plain int64, byCommand map[string]int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	byCommand = map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if name == "info" || name == "ping" || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") || name == "hello" {
			continue
		}
		all += n
		byCommand[name] = n
		switch {
		case strings.HasPrefix(name, "eval"):
			scripts += n
		case strings.HasPrefix(name, "script"):
			plain += n
		}
	}
	return all, scripts, plain, byCommand
}

// redisCPU reads the CPU time the Redis server has used, user and system,
// in seconds (INFO cpu).
func redisCPU(t *testing.T, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu: %q: %v", line, err)
			}
			sum += f
		}
	}
	return sum
}

func report(rs []loadResult, srv *redistest.Server) string {
	var b strings.Builder
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name\t: "); ok {
				cpu = v
				break
			}
		}
	}
	ver, _ := exec.Command("redis-server", "--version").Output()
	fmt.Fprintf(&b, "Measured %s by `make rls-bench` on %d CPUs (%s), %s, %s; each service alone for %v on one loopback Redis, "+
		"8 gRPC clients, each request one descriptor: every other one the hot rule (1000/s, saturated), the others 1,000 cold values (100/s each).\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), cpu, strings.TrimSpace(strings.SplitN(string(ver), " sha=", 2)[0]), runtime.Version(), *sbDuration)
	b.WriteString("| service | requests/s | p50 | p99 | Redis commands sent / request | Redis commands executed / request | Redis CPU / request | hot rule: most admitted in 1 s, whole run | the same, from 2 s on | cold requests denied | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		rps := float64(r.requests) / r.seconds
		fmt.Fprintf(&b, "| %s | %.0f | %v | %v | %.4f | %.4f | %.2fµs | %d (%.2fx) | %d (%.2fx) | %d | %d |\n", r.name, rps,
			r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond),
			float64(r.sent())/float64(max(r.requests, 1)), float64(r.commands)/float64(max(r.requests, 1)),
			r.redisCPU*1e6/float64(max(r.requests, 1)),
			r.worstWindow, float64(r.worstWindow)/1000, r.worstSaturated, float64(r.worstSaturated)/1000, r.coldDenied, r.errors)
	}
	if len(rs) >= 2 {
		ref, hl := rs[0], rs[1]
		per := func(r loadResult, n int64) float64 { return float64(n) / float64(max(r.requests, 1)) }
		fmt.Fprintf(&b, "\nDefault mode against the reference: %.1fx the requests/s; p99 %v against %v; "+
			"Redis commands sent a request %.4f against %.2f (1/%.0f), executed (a script's own calls counted one by one) %.4f against %.2f (1/%.0f).\n",
			(float64(hl.requests)/hl.seconds)/(float64(ref.requests)/ref.seconds), hl.p99.Round(10*time.Microsecond), ref.p99.Round(10*time.Microsecond),
			per(hl, hl.sent()), per(ref, ref.sent()), per(ref, ref.sent())/max(per(hl, hl.sent()), 1e-9),
			per(hl, hl.commands), per(ref, ref.commands), per(ref, ref.commands)/max(per(hl, hl.commands), 1e-9))
		fmt.Fprintf(&b, "Redis CPU a request %.2fµs against %.2fµs (1/%.0f).\n",
			hl.redisCPU*1e6/float64(max(hl.requests, 1)), ref.redisCPU*1e6/float64(max(ref.requests, 1)),
			(ref.redisCPU/float64(max(ref.requests, 1)))/max(hl.redisCPU/float64(max(hl.requests, 1)), 1e-12))
		b.WriteString(costs(hl))
	}
	return b.String()
}

// costs says where the default mode's executed commands go: key messages
// (nearly all the cold keys', the hot key sending at most one a round),
// and the commands each executes.
func costs(r loadResult) string {
	if r.messages <= 0 {
		return ""
	}
	const cold, coldLimit = 1000, 100 // benchYAML's
	var names []string
	for n := range r.byCommand {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(r.byCommand[b] - r.byCommand[a]) })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.4f", strings.ToUpper(n), float64(r.byCommand[n])/float64(max(r.requests, 1))))
	}
	inScripts := r.commands - r.scripts - r.plain // the presence records' few among them
	perKey := float64(r.coldRequests) / r.seconds / cold
	return fmt.Sprintf("\nWhere the default mode's executed commands go: %.0f key messages a second (%.4f a request), "+
		"nearly all for the cold keys: each cold key, asked %.1f times a second (%.0f%% of its limit), sent a message every %.2f s, one per %.1f of its requests; "+
		"a script call carried %.1f messages on average and executed %.2f commands a message (TIME once a call besides). "+
		"Executed commands a request, by name: %s.\n",
		r.messages/r.seconds, r.messages/float64(max(r.requests, 1)),
		perKey, perKey/coldLimit*100,
		cold*r.seconds/r.messages, float64(r.coldRequests)/r.messages, r.messages/float64(max(r.scripts, 1)),
		float64(inScripts-r.byCommand["time"])/r.messages, strings.Join(parts, ", "))
}

const (
	beginMark = "<!-- side-by-side: begin (written by make rls-bench) -->"
	endMark   = "<!-- side-by-side: end -->"
)

// writeSection replaces what stands between the markers of path.
func writeSection(path, text string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q section", path, beginMark, endMark)
	}
	out := s[:i+len(beginMark)] + "\n" + text + s[j:]
	return os.WriteFile(filepath.Clean(path), []byte(out), 0o644)
}
