package rls

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// RateLimitConfigType is the type URL of the xDS resources that carry rules:
// go-control-plane's ratelimit.config.ratelimit.v3.RateLimitConfig, one per
// domain, as Envoy Gateway serves them.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// LoadXDSConfig builds a Config from the resources of one xDS response, each
// a RateLimitConfig of one domain, checked as a rules file is; errors name the
// resource. Two resources of one domain are an error unless merge is set. A
// resource carrying fields this service does not know (a newer API's) is an
// error too: it would be served with a meaning missing.
func LoadXDSConfig(resources []*anypb.Any, merge bool) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for i, res := range resources {
		name := "resource " + strconv.Itoa(i)
		if res.GetTypeUrl() != RateLimitConfigType {
			return nil, failer(name)(0, "type %q is not %s", res.GetTypeUrl(), RateLimitConfigType)
		}
		var rc rlsconfpb.RateLimitConfig
		if err := res.UnmarshalTo(&rc); err != nil {
			return nil, failer(name)(0, "%v", err)
		}
		if rc.GetName() != "" {
			name = "resource " + strconv.Quote(rc.GetName())
		}
		fail := failer(name)
		if err := unknownFields(rc.ProtoReflect()); err != nil {
			return nil, fail(0, "%v", err)
		}
		root := yamlRoot{Domain: rc.GetDomain(), Descriptors: descriptorsOf(rc.GetDescriptors())}
		if err := c.add(root, merge, fail); err != nil {
			return nil, err
		}
		c.files = append(c.files, name)
	}
	return c, nil
}

// descriptorsOf turns xDS descriptors into the rules file's, which one set of
// checks then loads.
func descriptorsOf(ds []*rlsconfpb.RateLimitDescriptor) []yamlDescriptor {
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), Descriptors: descriptorsOf(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
		}
		if p := d.GetRateLimit(); p != nil {
			rl := &yamlRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
			// The two enums number their units alike; the response's
			// names every unit Envoy has, whatever the version of this one.
			if u := Unit(p.GetUnit()); u != rlspb.RateLimitResponse_RateLimit_UNKNOWN {
				rl.Unit = u.String()
			}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, yamlReplaces{Name: r.GetName()})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}

// unknownFields reports the first message under m that carries fields its
// type does not define.
func unknownFields(m protoreflect.Message) error {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, _ := protowire.ConsumeField(raw)
		return fmt.Errorf("a %s carries field number %d, which this service does not know (a newer API's) and so cannot honour", m.Descriptor().Name(), num)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = unknownFields(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			err = unknownFields(v.Message())
		}
		return err == nil
	})
	return err
}

// xdsSource keeps a Service's rules in step with an xDS management server:
// one Aggregated Discovery Service stream, state of the world, asking for
// RateLimitConfig resources. Each response is loaded whole and ACKed, or
// NACKed with the error while the rules in use stay. A stream that ends is
// opened again after a backoff, the rules in use serving meanwhile; while
// the server cannot be reached, a connection is tried every ConnectRetry.
// run is its only goroutine, and owns the connection.
type xdsSource struct {
	x      XDS
	merge  bool
	svc    *Service
	log    *slog.Logger
	loaded func() // called after rules load
	creds  credentials.TransportCredentials
	node   *corepb.Node

	accepted string // the version in use, sent with every request
	rejected string // the version last rejected, "" once one is accepted
}

func newXDSSource(x XDS, merge bool, svc *Service, log *slog.Logger, loaded func(), certs *certCounters) (*xdsSource, error) {
	creds, err := xdsCreds(x, log, certs)
	if err != nil {
		return nil, err
	}
	md := map[string]any{}
	for k, v := range x.NodeMetadata {
		md[k] = v
	}
	meta, err := structpb.NewStruct(md)
	if err != nil {
		return nil, fmt.Errorf("rls: CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
	}
	return &xdsSource{
		x: x, merge: merge, svc: svc, log: log, loaded: loaded, creds: creds,
		node: &corepb.Node{Id: x.NodeID, Metadata: meta, UserAgentName: "hybridlimit-rls"},
	}, nil
}

// xdsCreds builds the transport credentials of the xDS connection: TLS with
// the client certificate (reloaded when its files change) and the CA that
// signs the server's, or none.
func xdsCreds(x XDS, log *slog.Logger, certs *certCounters) (credentials.TransportCredentials, error) {
	if !x.TLS {
		return insecure.NewCredentials(), nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.ServerSAN}
	if x.ClientCert != "" {
		kp, err := newKeyPair(x.ClientCert, x.ClientKey, log, certs)
		if err != nil {
			return nil, fmt.Errorf("rls: CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY: %w", err)
		}
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(), nil }
	}
	if x.ServerCA != "" {
		pool, err := certPool(x.ServerCA)
		if err != nil {
			return nil, fmt.Errorf("rls: CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		conf.RootCAs = pool
	}
	return credentials.NewTLS(conf), nil
}

// run follows the server until ctx ends.
func (s *xdsSource) run(ctx context.Context) error {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(s.creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: s.x.ConnectRetry, Multiplier: 1, Jitter: 0.5, MaxDelay: s.x.ConnectRetry},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if s.x.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.x.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(s.x.ServerURL, opts...)
	if err != nil {
		return fmt.Errorf("rls: CONFIG_GRPC_XDS_SERVER_URL: %w", err)
	}
	defer conn.Close()
	ads := discoverypb.NewAggregatedDiscoveryServiceClient(conn)
	s.log.Info("rls: asking the xDS server for rules", "server", s.x.ServerURL, "node", s.x.NodeID)
	wait := backoffSeq{b: s.x.Backoff}
	for {
		answered, err := s.stream(ctx, ads)
		if ctx.Err() != nil {
			return nil
		}
		if answered {
			wait.reset()
		}
		d := wait.next()
		s.log.Warn("rls: the xDS stream ended; the rules in use stay", "err", err, "retry_in", d.String())
		if !sleepCtx(ctx, d) {
			return nil
		}
	}
}

// stream runs one ADS stream until it fails or ctx ends; answered reports
// whether the server sent anything on it.
func (s *xdsSource) stream(ctx context.Context, ads discoverypb.AggregatedDiscoveryServiceClient) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(s.x.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(s.x.Headers))
	}
	// WaitForReady: the stream waits for a connection rather than fail
	// while the server cannot be reached.
	st, err := ads.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	if err := st.Send(s.request("", nil)); err != nil {
		return false, err
	}
	// A server that sends a rejected version again at once (go-control-
	// plane's snapshot cache answers a NACK so) is answered after a
	// backoff, so that the two do not spin.
	again := backoffSeq{b: s.x.Backoff}
	for {
		resp, err := st.Recv()
		if err != nil {
			return answered, err
		}
		if !answered {
			s.log.Info("rls: the xDS server answers", "server", s.x.ServerURL)
		}
		answered = true
		detail, repeated := s.apply(resp)
		switch {
		case detail == nil:
			again.reset()
		case repeated:
			if !sleepCtx(ctx, again.next()) {
				return answered, ctx.Err()
			}
		}
		if err := st.Send(s.request(resp.GetNonce(), detail)); err != nil {
			return answered, err
		}
	}
}

// request is the next DiscoveryRequest: an ACK of the version in use, or,
// with detail, a NACK of the response of nonce.
func (s *xdsSource) request(nonce string, detail *statuspb.Status) *discoverypb.DiscoveryRequest {
	return &discoverypb.DiscoveryRequest{
		Node: s.node, TypeUrl: RateLimitConfigType, VersionInfo: s.accepted, ResponseNonce: nonce, ErrorDetail: detail,
	}
}

// apply loads a response. It returns nil when the response's rules replace
// those in use, else the NACK's error detail, and whether that version was
// rejected just before. A version rejected is counted and logged once.
func (s *xdsSource) apply(resp *discoverypb.DiscoveryResponse) (detail *statuspb.Status, repeated bool) {
	version := resp.GetVersionInfo()
	var cfg *Config
	var err error
	if resp.GetTypeUrl() != RateLimitConfigType {
		err = fmt.Errorf("%w: the response's type %q is not %s", ErrConfig, resp.GetTypeUrl(), RateLimitConfigType)
	} else {
		cfg, err = LoadXDSConfig(resp.GetResources(), s.merge)
	}
	if err != nil {
		repeated = s.rejected == version
		if !repeated {
			s.svc.ConfigError()
			s.log.Error("rls: xDS rules rejected; the rules in use stay", "version", version, "err", err)
		}
		s.rejected = version
		return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}, repeated
	}
	s.accepted, s.rejected = version, ""
	s.svc.SetConfig(cfg)
	if s.loaded != nil {
		s.loaded()
	}
	s.log.Info("rls: xDS rules loaded", "version", version, "domains", strings.Join(cfg.Domains(), ","))
	return nil, false
}

// backoffSeq is the sequence of waits of a Backoff.
type backoffSeq struct {
	b Backoff
	n int // failures since the last reset
}

func (q *backoffSeq) reset() { q.n = 0 }

func (q *backoffSeq) next() time.Duration {
	d := q.b.Initial
	for i := 0; i < q.n && d < q.b.Max; i++ {
		d *= 2
	}
	d = min(d, q.b.Max)
	q.n++
	if q.b.Jitter && q.b.RandomFactor > 0 {
		d = time.Duration(float64(d) * (1 + q.b.RandomFactor*(2*rand.Float64()-1)))
	}
	return d
}

// sleepCtx waits d, or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
