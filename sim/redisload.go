package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
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

// liveMasters returns the masters of t, in the order of the first slot
// each serves, and for each slot the index of its master; one server is
// the one master of every slot (nil).
func liveMasters(ctx context.Context, t LiveTarget) ([]string, []int, error) {
	if t.Addr != "" {
		return []string{t.Addr}, nil, nil
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Cluster, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("sim: CLUSTER SLOTS: %w", err)
	}
	slices.SortFunc(ranges, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var addrs []string
	of := make([]int, hybridlimit.SlotCount)
	for _, r := range ranges {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= hybridlimit.SlotCount || r.Start > r.End {
			return nil, nil, fmt.Errorf("sim: CLUSTER SLOTS: range %d-%d without a master", r.Start, r.End)
		}
		i := slices.Index(addrs, r.Nodes[0].Addr)
		if i < 0 {
			i = len(addrs)
			addrs = append(addrs, r.Nodes[0].Addr)
		}
		for s := r.Start; s <= r.End; s++ {
			of[s] = i
		}
	}
	return addrs, of, nil
}

// mastersCPU returns the CPU time each server of addrs has used since it
// started (nodeCPU).
func mastersCPU(ctx context.Context, addrs []string) ([]time.Duration, error) {
	out := make([]time.Duration, len(addrs))
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		d, err := nodeCPU(ctx, c)
		_ = c.Close()
		if err != nil {
			return nil, fmt.Errorf("sim: %s: %w", addr, err)
		}
		out[i] = d
	}
	return out, nil
}
