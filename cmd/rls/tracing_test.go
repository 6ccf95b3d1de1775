package main_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver takes OTLP trace exports over HTTP or gRPC, as a collector
// does, and keeps the spans with their resource's attributes.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	span     *tracepb.Span
	resource map[string]string
}

func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, receivedSpan{span: s, resource: res})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	resp, _ := o.Export(r.Context(), &req)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (o *otlpReceiver) received() []receivedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]receivedSpan(nil), o.spans...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		}
	}
	return m
}

// TestTracing sends calls carrying a W3C traceparent, as Envoy does with
// tracing on, to the service exporting to an in-process OTLP receiver,
// over OTLP/HTTP (the default, which Envoy Gateway uses) and gRPC: each
// call is one span, the child of the caller's span, with the domain and
// the decision, under the resource Envoy Gateway's settings name.
func TestTracing(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := &otlpReceiver{}
			var endpoint string
			if protocol == "http" {
				srv := httptest.NewServer(rcv)
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			} else {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				g := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(g, rcv)
				go func() { _ = g.Serve(lis) }()
				t.Cleanup(g.Stop)
				endpoint = "http://" + lis.Addr().String()
			}
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}),
				"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", protocol, "TRACING_SERVICE_NAME", "envoy-ratelimit",
				"TRACING_SERVICE_NAMESPACE", "envoy-gateway-system", "TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-0",
				"TRACING_SAMPLING_RATE", "0", // the caller's sampled flag decides
				"OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, "OTEL_BSP_SCHEDULE_DELAY", "50")
			p := start(t, rlsBinary(t), e)

			trace := "4bf92f3577b34da6a3ce929d0e0e4736"
			parents := []string{"00f067aa0ba902b1", "00f067aa0ba902b2", "00f067aa0ba902b3"}
			for i, parent := range parents {
				ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+trace+"-"+parent+"-01")
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := p.client.ShouldRateLimit(ctx, request("basic", 0, entries("key1", "v"+strconv.Itoa(i))))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			// A caller that says not sampled is not traced.
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+trace+"-00f067aa0ba902b9-00")
			if _, err := p.client.ShouldRateLimit(ctx, request("basic", 0, entries("key1", "x"))); err != nil {
				t.Fatal(err)
			}
			// /json reads traceparent from the HTTP headers.
			body := `{"domain":"basic","descriptors":[{"entries":[{"key":"zero","value":"z"}]}]}`
			req, _ := http.NewRequest(http.MethodPost, p.httpURL+"/json", bytes.NewBufferString(body))
			req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b4-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			parents = append(parents, "00f067aa0ba902b4")

			waitFor(t, "the spans", func() bool { return len(rcv.received()) >= len(parents) })
			time.Sleep(200 * time.Millisecond) // any span too many arrives too
			got := rcv.received()
			if len(got) != len(parents) {
				t.Fatalf("%d spans for %d sampled calls, want one each", len(got), len(parents))
			}
			for i, s := range got {
				sp := s.span
				if hex.EncodeToString(sp.GetTraceId()) != trace || hex.EncodeToString(sp.GetParentSpanId()) != parents[i] {
					t.Errorf("span %d: trace %x parent %x, want trace %s parent %s", i, sp.GetTraceId(), sp.GetParentSpanId(), trace, parents[i])
				}
				a := attrs(sp.GetAttributes())
				wantCode := "OK"
				if i == 3 {
					wantCode = "OVER_LIMIT" // the rule of 0 a second
				}
				if sp.GetName() != "ShouldRateLimit" || sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER ||
					a["ratelimit.domain"] != "basic" || a["ratelimit.overall_code"] != wantCode || a["ratelimit.descriptors"] != "1" {
					t.Errorf("span %d: %s %v %v, want ShouldRateLimit, server, domain basic, code %s", i, sp.GetName(), sp.GetKind(), a, wantCode)
				}
				if r := s.resource; r["service.name"] != "envoy-ratelimit" || r["service.namespace"] != "envoy-gateway-system" || r["service.instance.id"] != "envoy-ratelimit-0" {
					t.Errorf("span %d: resource %v", i, r)
				}
			}
		})
	}
}
