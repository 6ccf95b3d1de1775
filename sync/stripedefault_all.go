//go:build hybridlimit_stripeall

package sync

// defaultStripeDemand spreads every key's allowance: see stripedefault.go.
const defaultStripeDemand = 0
