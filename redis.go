package hybridlimit

import (
	"fmt"
	"reflect"

	"github.com/redis/go-redis/v9"
)

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

// CheckClient returns an error wrapping ErrNilClient if rdb is nil or an
// interface holding a nil pointer (a typed nil such as
// (*redis.Client)(nil)), which would panic on first use.
func CheckClient(rdb Redis) error {
	if rdb == nil {
		return ErrNilClient
	}
	v := reflect.ValueOf(rdb)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return fmt.Errorf("%w: %T(nil)", ErrNilClient, rdb)
		}
	}
	return nil
}
