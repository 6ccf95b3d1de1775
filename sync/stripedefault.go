//go:build !hybridlimit_stripeall

package sync

// defaultStripeDemand is Tuning.StripeDemand's default. Building with the tag
// hybridlimit_stripeall makes it 0, so that the whole test suite runs with
// every key's allowance spread (make test runs it both ways).
const defaultStripeDemand = 100_000
