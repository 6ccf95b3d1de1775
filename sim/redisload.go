package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCPU returns the CPU time the Redis servers of t have used since
// they started, user and system (INFO cpu), summed over every node of a
// cluster, replicas included: the work a run causes wherever it lands.
func redisCPU(ctx context.Context, t LiveTarget) (time.Duration, error) {
	if t.Addr != "" {
		c := redis.NewClient(&redis.Options{Addr: t.Addr, Protocol: 2, DisableIdentity: true})
		defer c.Close()
		return nodeCPU(ctx, c)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Cluster, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	var (
		mu  stdsync.Mutex
		sum time.Duration
	)
	err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		d, err := nodeCPU(ctx, n)
		mu.Lock()
		sum += d
		mu.Unlock()
		return err
	})
	return sum, err
}

// nodeCPU reads one server's used_cpu_sys and used_cpu_user.
func nodeCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("sim: INFO cpu: %w", err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("sim: INFO cpu: %q: %w", line, err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second)), nil
}
