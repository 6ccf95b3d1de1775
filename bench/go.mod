module github.com/hybridlimit/hybridlimit/bench

go 1.26.0

replace github.com/hybridlimit/hybridlimit => ../

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/hybridlimit/hybridlimit v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.16.0
)

require (
	github.com/benbjohnson/clock v1.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
