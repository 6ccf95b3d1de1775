package sync

import "github.com/hybridlimit/hybridlimit/internal/histogram"

// The Limiter's histograms (see Stats).
var (
	// roundDuration: from half a millisecond (a round on loopback) to 2.5
	// seconds (past any sane round timeout; a client that ignores context
	// deadlines waits out its ReadTimeout), about 2.5x apart.
	roundDuration = histogram.Spec{
		Bounds: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		Per:    1e9,
	}
	// roundMessages: powers of 4 up to 65536, which spans a single key, one
	// full script call (256 keys by default) and a 64-call pipeline.
	roundMessages = histogram.Spec{
		Bounds: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536},
		Per:    1,
	}
)
