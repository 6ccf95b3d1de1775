package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Tracing says whether and how the service sends traces: OpenTelemetry
// over OTLP, the TRACING_* variables with the reference's defaults. Where
// and how to send (endpoint, headers, TLS, timeout, batching) is the
// OpenTelemetry SDK's business, read from the standard OTEL_* variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_BSP_SCHEDULE_DELAY, ...).
type Tracing struct {
	Enabled bool
	// Protocol is "http" (OTLP/HTTP, protobuf) or "grpc".
	Protocol                           string
	ServiceName, Namespace, InstanceID string
	// SamplingRate is the share of traces sampled that the caller did not
	// decide: a request whose trace context says sampled (or not) is
	// traced (or not) as it says.
	SamplingRate float64
}

// tracer is the service's OpenTelemetry tracing: a tracer provider of the
// SDK exporting over OTLP, and the W3C trace context (and baggage)
// propagation that reads a request's parent span.
type tracer struct {
	tp    *sdktrace.TracerProvider
	t     trace.Tracer
	props propagation.TextMapPropagator
}

// newTracer starts the SDK's tracer provider; its batching goroutine runs
// until shutdown.
func newTracer(ctx context.Context, set Tracing) (*tracer, error) {
	var client otlptrace.Client
	switch strings.ToLower(set.Protocol) {
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("rls: tracing: %w", err)
	}
	id := set.InstanceID
	if id == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(set.ServiceName), semconv.ServiceInstanceID(id)}
	if set.Namespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(set.Namespace))
	}
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME come after, so they
	// override.
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("rls: tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(set.SamplingRate))),
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	return &tracer{
		tp:    tp,
		t:     tp.Tracer("github.com/hybridlimit/hybridlimit/rls"),
		props: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// shutdown sends the spans still batched and stops the provider.
func (t *tracer) shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// unary reads the trace context of a gRPC call's metadata (Envoy's
// traceparent) into its context.
func (t *tracer) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return handler(t.props.Extract(ctx, metadataCarrier(md)), req)
}

// metadataCarrier reads and writes gRPC metadata as a TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Span attributes of a ShouldRateLimit span.
const (
	attrDomain      = "ratelimit.domain"
	attrDescriptors = "ratelimit.descriptors"
	attrCode        = "ratelimit.overall_code"
)

// startSpan starts the span of one ShouldRateLimit call, a child of the
// caller's when its context carries one; end closes it with the decision.
// With no tracer both do nothing.
func (t *tracer) startSpan(ctx context.Context, req *rlspb.RateLimitRequest) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, span := t.t.Start(ctx, "ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrDomain, req.GetDomain()), attribute.Int(attrDescriptors, len(req.GetDescriptors())))
	}
	return ctx, span
}

func endSpan(span trace.Span, resp *rlspb.RateLimitResponse, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.String(attrCode, resp.GetOverallCode().String()))
		}
	}
	span.End()
}
