package main_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	ratelimitfilterpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/hybridlimit/hybridlimit/rls"
)

// deployDir holds the manifests the deployment guide of docs/rls.md uses.
const deployDir = "../../deploy"

// yamlDocs reads every document of a YAML file under deploy/.
func yamlDocs(t *testing.T, name string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// at walks a decoded YAML document by keys and list indexes.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

func str(v any) string { s, _ := v.(string); return s }

// protoOf decodes a YAML value into a message, as Envoy reads its
// configuration (typed_config included), and runs the protos' validation.
func protoOf(t *testing.T, where string, v any, m proto.Message) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: not a %T: %v", where, m, err)
	}
	if vm, ok := m.(interface{ ValidateAll() error }); ok {
		if err := vm.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	}
}

// serviceSpec is what a Deployment of the service says of it.
type serviceSpec struct {
	env     map[string]string
	domains []string // of the rules it mounts
	rules   *rls.Config
}

// checkDeployment checks a manifest file's Deployment of the service as
// the service reads it: the command Envoy Gateway and Istio run, an
// environment FromEnv takes (no setting it does not know), the probes on
// the HTTP port's /healthcheck, user 65534 on a read-only root, the rules
// ConfigMap of the same file mounted where the environment says and
// loading, and a Service that sends gRPC on 8081 to it.
func checkDeployment(t *testing.T, name string) serviceSpec {
	t.Helper()
	docs := yamlDocs(t, name)
	var spec serviceSpec
	var dep map[string]any
	configMaps := map[string]map[string]any{}
	var services []map[string]any
	for _, d := range docs {
		switch d["kind"] {
		case "Deployment":
			if strings.Contains(str(at(d, "spec", "template", "spec", "containers", 0, "image")), "hybridlimit/rls") {
				dep = d
			}
		case "ConfigMap":
			configMaps[str(at(d, "metadata", "name"))] = d
		case "Service":
			services = append(services, d)
		}
	}
	if dep == nil {
		t.Fatalf("%s: no Deployment of the hybridlimit/rls image", name)
	}
	pod := at(dep, "spec", "template", "spec")
	c := at(pod, "containers", 0)
	if cmd := list(at(c, "command")); len(cmd) != 1 || cmd[0] != "/bin/ratelimit" {
		t.Errorf("%s: command %v, want [/bin/ratelimit]", name, cmd)
	}
	spec.env = map[string]string{}
	var environ []string
	for _, e := range list(at(c, "env")) {
		k, v := str(at(e, "name")), str(at(e, "value"))
		if at(e, "valueFrom") != nil {
			v = "from-the-pod"
		}
		spec.env[k] = v
		environ = append(environ, k+"="+v)
	}
	set, err := rls.FromEnv(func(k string) (string, bool) { v, ok := spec.env[k]; return v, ok }, environ)
	if err != nil {
		t.Fatalf("%s: the environment: %v", name, err)
	}
	for _, n := range set.Notes {
		if strings.Contains(n, "is not a setting") {
			t.Errorf("%s: %s", name, n)
		}
	}
	ports := map[string]int{}
	for _, p := range list(at(c, "ports")) {
		ports[str(at(p, "name"))] = at(p, "containerPort").(int)
	}
	portOf := func(v any) int {
		if n, ok := v.(int); ok {
			return n
		}
		return ports[str(v)]
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		if g := at(c, probe, "httpGet"); g != nil && (str(at(g, "path")) != "/healthcheck" || portOf(at(g, "port")) != set.Port) {
			t.Errorf("%s: %s on %v %v, want /healthcheck on %d", name, probe, at(g, "path"), at(g, "port"), set.Port)
		}
	}
	if at(c, "readinessProbe") == nil {
		t.Errorf("%s: no readiness probe", name)
	}
	if u := at(pod, "securityContext", "runAsUser"); u != 65534 {
		t.Errorf("%s: runAsUser %v, want 65534", name, u)
	}
	if ro := at(c, "securityContext", "readOnlyRootFilesystem"); ro != true {
		t.Errorf("%s: readOnlyRootFilesystem %v, want true", name, ro)
	}
	mounts := map[string]string{}
	for _, m := range list(at(c, "volumeMounts")) {
		mounts[str(at(m, "name"))] = str(at(m, "mountPath"))
	}
	for _, v := range list(at(pod, "volumes")) {
		cm := configMaps[str(at(v, "configMap", "name"))]
		if cm == nil {
			continue
		}
		if got := mounts[str(at(v, "name"))]; got != set.Runtime.Dir {
			t.Errorf("%s: rules mounted at %q, the service reads %q", name, got, set.Runtime.Dir)
		}
		var files []rls.File
		for k, text := range at(cm, "data").(map[string]any) {
			files = append(files, rls.File{Name: k, Data: []byte(str(text))})
		}
		if spec.rules, err = rls.LoadConfig(files, set.Runtime.Merge); err != nil {
			t.Errorf("%s: the rules: %v", name, err)
		} else {
			spec.domains = spec.rules.Domains()
		}
	}
	if spec.rules == nil {
		t.Errorf("%s: no rules ConfigMap mounted", name)
	}
	grpcPort := false
	for _, s := range services {
		if str(at(s, "metadata", "name")) != "ratelimit" {
			continue
		}
		for _, p := range list(at(s, "spec", "ports")) {
			grpcPort = grpcPort || (at(p, "port") == set.GRPCPort && portOf(at(p, "targetPort")) == set.GRPCPort)
		}
	}
	if !grpcPort {
		t.Errorf("%s: no Service ratelimit sending port %d to the gRPC port", name, set.GRPCPort)
	}
	return spec
}

// TestDeployKubernetes checks deploy/kubernetes and deploy/envoy: the
// service's manifests, and Envoy's configuration against Envoy's own
// protos, calling the Service with descriptors the rules define.
func TestDeployKubernetes(t *testing.T) {
	t.Parallel()
	spec := checkDeployment(t, "kubernetes/ratelimit.yaml")
	if spec.env["REDIS_URL"] != "redis:6379" {
		t.Errorf("REDIS_URL %q, want the example Redis, redis:6379", spec.env["REDIS_URL"])
	}
	if at(yamlDocs(t, "kubernetes/redis.yaml")[0], "metadata", "name") != "redis" {
		t.Error("kubernetes/redis.yaml: the first document is not the Service redis")
	}
	kust := yamlDocs(t, "kubernetes/kustomization.yaml")[0]
	for _, r := range list(kust["resources"]) {
		if _, err := os.Stat(filepath.Join(deployDir, "kubernetes", str(r))); err != nil {
			t.Errorf("kustomization.yaml: %v", err)
		}
	}

	var bs bootstrappb.Bootstrap
	protoOf(t, "envoy/envoy.yaml", yamlDocs(t, "envoy/envoy.yaml")[0], &bs)
	var hcm hcmpb.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitfilterpb.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.domains, rl.GetDomain()) {
		t.Errorf("envoy.yaml: domain %q, the rules define %v", rl.GetDomain(), spec.domains)
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() {
			a := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			if a.GetAddress() != "ratelimit" || a.GetPortValue() != 8081 {
				t.Errorf("envoy.yaml: the rate limit cluster goes to %s:%d, the Service is ratelimit:8081", a.GetAddress(), a.GetPortValue())
			}
		}
	}
	for _, r := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRateLimits() {
		a := r.GetActions()[0]
		switch {
		case a.GetRemoteAddress() != nil:
			checkRuleFor(t, spec.rules, rl.GetDomain(), "remote_address", "10.0.0.1")
		case a.GetGenericKey() != nil:
			checkRuleFor(t, spec.rules, rl.GetDomain(), "generic_key", a.GetGenericKey().GetDescriptorValue())
		}
	}
}

// checkRuleFor checks that a descriptor of one entry gets a limit.
func checkRuleFor(t *testing.T, c *rls.Config, domain, key, value string) {
	t.Helper()
	d := &rlpb.RateLimitDescriptor{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	if c.Match(domain, d) == nil {
		t.Errorf("the descriptor %s=%s of domain %s matches no rule", key, value, domain)
	}
}

// TestDeployIstio checks Istio's sample as adapted in deploy/istio: the
// service's Deployment, and the EnvoyFilter's rate limit filter against
// Envoy's protos, naming the rules' domain and the Service's gRPC port,
// sending a descriptor the rules limit.
func TestDeployIstio(t *testing.T) {
	t.Parallel()
	spec := checkDeployment(t, "istio/ratelimit.yaml")
	if spec.env["HOST"] != "::" || spec.env["GRPC_HOST"] != "::" {
		t.Errorf("HOST %q, GRPC_HOST %q: want :: as Istio's sample has", spec.env["HOST"], spec.env["GRPC_HOST"])
	}
	docs := yamlDocs(t, "istio/envoyfilter.yaml")
	var f hcmpb.HttpFilter
	protoOf(t, "istio/envoyfilter.yaml", at(docs[0], "spec", "configPatches", 0, "patch", "value"), &f)
	var rl ratelimitfilterpb.RateLimit
	if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.domains, rl.GetDomain()) {
		t.Errorf("envoyfilter.yaml: domain %q, the rules define %v", rl.GetDomain(), spec.domains)
	}
	if c := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "outbound|8081||ratelimit.default.svc.cluster.local" {
		t.Errorf("envoyfilter.yaml: cluster %q, want the Service ratelimit's port 8081", c)
	}
	key := str(at(docs[1], "spec", "configPatches", 0, "patch", "value", "rate_limits", 0, "actions", 0, "request_headers", "descriptor_key"))
	checkRuleFor(t, spec.rules, rl.GetDomain(), key, "/productpage")
	checkRuleFor(t, spec.rules, rl.GetDomain(), key, "/reviews")
}

// egEnv is the environment Envoy Gateway's deployment of the rate limit
// service sets (with tracing on), less the values the test cannot know.
var egEnv = map[string]string{
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
	"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
	"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379", "USE_PROMETHEUS": "true",
	"PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml", "TRACING_ENABLED": "true",
	"TRACING_SERVICE_NAME": "envoy-ratelimit", "TRACING_SERVICE_NAMESPACE": "envoy-gateway-system",
	"TRACING_SERVICE_INSTANCE_ID": "envoy-ratelimit-0", "TRACING_SAMPLING_RATE": "1.0",
	"OTEL_EXPORTER_OTLP_ENDPOINT": "http://trace-collector.envoy-gateway-system.svc.cluster.local:4318",
}

// TestDeployEnvoyGateway checks deploy/envoy-gateway/values.yaml: it names
// this image, and the environment Envoy Gateway then gives the service,
// with the values' additions, is one the service takes, over xDS, with no
// setting it does not know.
func TestDeployEnvoyGateway(t *testing.T) {
	t.Parallel()
	v := yamlDocs(t, "envoy-gateway/values.yaml")[0]
	if img := str(at(v, "global", "images", "ratelimit", "image")); !strings.Contains(img, "hybridlimit/rls") {
		t.Errorf("values.yaml: the rate limit image is %q", img)
	}
	env := map[string]string{}
	for k, val := range egEnv {
		env[k] = val
	}
	for _, e := range list(at(v, "config", "envoyGateway", "provider", "kubernetes", "rateLimitDeployment", "container", "env")) {
		val := str(at(e, "value"))
		if at(e, "valueFrom") != nil {
			val = "from-the-pod"
		}
		env[str(at(e, "name"))] = val
	}
	if url := str(at(v, "config", "envoyGateway", "rateLimit", "backend", "redis", "url")); url != egEnv["REDIS_URL"] {
		t.Errorf("values.yaml: Redis %q, want the example Redis in redis-system, %q", url, egEnv["REDIS_URL"])
	}
	var environ []string
	for k, val := range env {
		environ = append(environ, k+"="+val)
	}
	set, err := rls.FromEnv(func(k string) (string, bool) { val, ok := env[k]; return val, ok }, environ)
	if err != nil {
		t.Fatal(err)
	}
	if set.ConfigType != rls.ConfigXDS || !set.XDS.TLS || !set.ForceStart || !set.Tracing.Enabled {
		t.Errorf("Envoy Gateway's environment read as %+v", set)
	}
	for _, n := range set.Notes {
		if strings.Contains(n, "is not a setting") {
			t.Error(n)
		}
	}
	if at(yamlDocs(t, "envoy-gateway/backendtrafficpolicy.yaml")[0], "kind") != "BackendTrafficPolicy" {
		t.Error("backendtrafficpolicy.yaml: not a BackendTrafficPolicy")
	}
	// The token quota: a check on the request (cost 0, which the service
	// answers OVER_LIMIT while the key is in debt) and the tokens used on
	// the response (counted whole, TestStreamEndHits).
	q := yamlDocs(t, "envoy-gateway/tokenquota.yaml")[0]
	cost := at(q, "spec", "rateLimit", "global", "rules", 0, "cost")
	if at(q, "kind") != "BackendTrafficPolicy" || at(cost, "request", "from") != "Number" || at(cost, "request", "number") != 0 ||
		at(cost, "response", "from") != "Metadata" || at(cost, "response", "metadata", "key") == nil {
		t.Errorf("tokenquota.yaml: want a BackendTrafficPolicy whose rule checks with cost 0 and counts the response's usage, got cost %v", cost)
	}
}
