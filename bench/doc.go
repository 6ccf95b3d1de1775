// Package bench compares hybridlimit with its peers, side by side, in one
// run on one machine and one Redis: the local hot path against
// golang.org/x/time/rate and go.uber.org/ratelimit, the exact global
// limiter against github.com/go-redis/redis_rate/v10, and the hybrid
// limiter against redis_rate in decisions per second and Redis commands per
// decision.
//
// It is a module of its own so that the library's go.mod never depends on
// the peers. The package has benchmarks only; run.sh runs them, starting a
// redis-server of their own on a free loopback port, and cmd/report turns
// their output into RESULTS.md. README.md says what each benchmark measures
// and which caveats apply.
package bench
