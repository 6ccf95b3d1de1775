package hybridlimit

import "github.com/redis/go-redis/v9"

// Redis is the part of a go-redis client the distributed limiters use:
// scripts, and pipelines to batch them. *redis.Client, *redis.ClusterClient,
// *redis.Ring and redis.UniversalClient all satisfy it, and so can a test
// double.
type Redis interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

var (
	_ Redis = (*redis.Client)(nil)
	_ Redis = (*redis.ClusterClient)(nil)
	_ Redis = (redis.UniversalClient)(nil)
)
