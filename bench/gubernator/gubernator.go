package gubernator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sim"
)

// Contenders returns Gubernator as contenders of sim.RunLive, a Cluster
// of Scenario.Instances daemons started for each run: with its leaky
// bucket, the same limit as the others', and with its token bucket, its
// default algorithm.
func Contenders() []sim.Contender {
	start := func(alg guber.Algorithm) func(context.Context, sim.Scenario) (sim.ContenderRun, error) {
		return func(ctx context.Context, sc sim.Scenario) (sim.ContenderRun, error) {
			return Start(ctx, sc.Instances, sc.Limit, alg)
		}
	}
	return []sim.Contender{
		{Name: "gubernator-leaky", Start: start(guber.Algorithm_LEAKY_BUCKET)},
		{Name: "gubernator-token", Start: start(guber.Algorithm_TOKEN_BUCKET)},
	}
}

// Cluster is Gubernator daemons in this process, each serving gRPC on a
// loopback port of its own and peered with the others, and a client of
// each: the callers of instance i ask daemon i.
type Cluster struct {
	daemons []*guber.Daemon
	conns   []*grpc.ClientConn
	clients []guber.V1Client
	limit   hybridlimit.Limit // every key's
	alg     guber.Algorithm
	scrape  *http.Client
	log     *logrus.Logger
}

// Start starts n daemons with Gubernator's default behaviour settings
// (GLOBAL hits sent to a key's owner and its state broadcast back every
// GlobalSyncWait, 100 ms), each key limited to l by algorithm alg.
//
// Gubernator's leaky bucket is l's token bucket: it holds up to Burst and
// refills Rate every Period, continuously. Its token bucket is not: it
// ignores Burst and gives back the whole limit (Rate) a Period after a
// key's first hit, up to twice the limit in a period across that reset,
// which the oracle counts against it. With Burst equal to Rate (the
// hotspot's limit), one daemon enforcing it alone admits at most B + r T
// in a run of length T, as a token bucket does.
func Start(ctx context.Context, n int, l hybridlimit.Limit, alg guber.Algorithm) (*Cluster, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Period%time.Millisecond != 0 {
		return nil, fmt.Errorf("gubernator: period %v is not whole milliseconds, as Gubernator's durations are", l.Period)
	}
	c := &Cluster{limit: l, alg: alg, scrape: &http.Client{Timeout: callTimeout}}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetLevel(logrus.WarnLevel)
	c.log = log
	var peers []guber.PeerInfo
	for i := range n {
		addr, err := freeAddr()
		if err != nil {
			c.Close()
			return nil, err
		}
		d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
			GRPCListenAddress: addr,
			AdvertiseAddress:  addr,
			HTTPListenAddress: "127.0.0.1:0",
			InstanceID:        fmt.Sprintf("g%d", i),
			Logger:            log.WithField("instance", i),
		})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("gubernator: daemon %d: %w", i, err)
		}
		c.daemons = append(c.daemons, d)
		peers = append(peers, guber.PeerInfo{GRPCAddress: addr, HTTPAddress: d.HTTPListener.Addr().String()})
	}
	for _, d := range c.daemons {
		d.SetPeers(peers)
	}
	for _, p := range peers {
		conn, err := grpc.NewClient(p.GRPCAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("gubernator: client of %s: %w", p.GRPCAddress, err)
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, guber.NewV1Client(conn))
	}
	return c, nil
}

// freeAddr returns a loopback address whose port was free a moment ago:
// a daemon advertises the address it listens on, so it needs it before
// it listens.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("gubernator: a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// callTimeout bounds a call, so that a daemon that stops answering ends
// the run with an error rather than hanging it.
const callTimeout = 5 * time.Second

// Allow asks daemon inst for one hit on key.
func (c *Cluster) Allow(ctx context.Context, inst int, key string) (bool, error) {
	if inst < 0 || inst >= len(c.clients) {
		return false, fmt.Errorf("gubernator: instance %d of %d", inst, len(c.clients))
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req := &guber.RateLimitReq{
		Name: "sim", UniqueKey: key, Hits: 1,
		Limit: c.limit.Rate, Duration: c.limit.Period.Milliseconds(), Burst: c.limit.Burst,
		Algorithm: c.alg, Behavior: guber.Behavior_GLOBAL,
	}
	resp, err := c.clients[inst].GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{req}})
	if err != nil {
		return false, err
	}
	if len(resp.Responses) != 1 {
		return false, fmt.Errorf("gubernator: %d responses to one request", len(resp.Responses))
	}
	r := resp.Responses[0]
	if r.Error != "" {
		return false, errors.New("gubernator: " + r.Error)
	}
	return r.Status == guber.Status_UNDER_LIMIT, nil
}

// Calls returns the gRPC calls the daemons have served, callers' and
// peers' (each daemon's gubernator_grpc_request_counts, every method and
// status).
func (c *Cluster) Calls(ctx context.Context) (int64, error) {
	var total float64
	for _, d := range c.daemons {
		n, err := c.served(ctx, "http://"+d.HTTPListener.Addr().String()+"/metrics")
		if err != nil {
			return 0, err
		}
		total += n
	}
	return int64(total), nil
}

func (c *Cluster) served(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.scrape.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gubernator: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("gubernator: metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("gubernator: metrics: %w", err)
	}
	f := families["gubernator_grpc_request_counts"]
	if f == nil {
		return 0, nil // nothing served yet
	}
	var n float64
	for _, m := range f.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n, nil
}

// Close closes the clients and stops the daemons. It lets the daemons'
// GLOBAL loops go quiet first (quiet): Gubernator's one-shot ticker
// (Interval.Stop, which Daemon.Close calls) waits forever for its
// goroutine when that goroutine has a tick to send and the last is still
// unread, which a daemon stopped under load can leave. A daemon that
// still does not stop within callTimeout is an error, not a hang. The
// daemons still running send their last hits to those stopped: those
// errors are not logged.
func (c *Cluster) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	time.Sleep(quiet)
	c.log.SetLevel(logrus.FatalLevel)
	for i, d := range c.daemons {
		stopped := make(chan struct{})
		go func() {
			d.Close()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(callTimeout):
			errs = append(errs, fmt.Errorf("gubernator: daemon %d did not stop within %v", i, callTimeout))
		}
	}
	return errors.Join(errs...)
}

// quiet is four of Gubernator's default GlobalSyncWait: time for the
// hits and broadcasts queued when the callers stop to be sent.
const quiet = 400 * time.Millisecond
