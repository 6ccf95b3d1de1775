package sim

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
)

// ModelMasters is how many masters the cluster modelled in virtual mode
// has.
const ModelMasters = 3

// modelCluster is a client of the embedded Redis that a hybrid limiter
// takes for a cluster's: MasterForKey names, for each slot, one of n
// masters owning contiguous slot ranges, as redis-cli lays out a new
// cluster, so the limiter groups its calls by master as on a real one.
// Every command still goes to the one embedded server, which serves every
// slot.
type modelCluster struct {
	*redis.Client
	masters []*redis.Client
}

// newModelCluster returns c seen as a cluster of n masters. The masters'
// clients are names only: nothing is sent through them.
func newModelCluster(c *redis.Client, n int) *modelCluster {
	m := &modelCluster{Client: c, masters: make([]*redis.Client, n)}
	for i := range m.masters {
		m.masters[i] = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("master-%d", i), MaintNotificationsConfig: offline()})
	}
	return m
}

// MasterForKey returns the master serving key's slot.
func (m *modelCluster) MasterForKey(_ context.Context, key string) (*redis.Client, error) {
	return m.masters[modelMaster(hybridlimit.Slot(key), len(m.masters))], nil
}

// modelMaster returns which of n masters, owning equal contiguous slot
// ranges in order, serves slot.
func modelMaster(slot, n int) int { return slot * n / hybridlimit.SlotCount }

// Close closes every client.
func (m *modelCluster) Close() error {
	errs := []error{m.Client.Close()}
	for _, c := range m.masters {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
