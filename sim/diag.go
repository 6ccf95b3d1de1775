package sim

import (
	"bytes"
	"fmt"
	"io"
	"slices"
)

// WriteDiag writes, for each result, the limiters' counters, where its
// Redis commands went (by phase; with Config.Detail, by class of key
// demand, and the sync messages of each class by kind), and the keys it
// admitted most above and below the oracle. This is cmd/sim's -diag.
func (rep *Report) WriteDiag(w io.Writer) error {
	var b bytes.Buffer
	for _, r := range rep.Results {
		d := r.Diag
		fmt.Fprintf(&b, "\n== %s\n", r.Label())
		fmt.Fprintf(&b, "   commands: decision %d, round %d, presence %d\n", d.byPhase[phaseDecision], d.byPhase[phaseRound], d.byPhase[phasePresence])
		if r.Strategy == Optimistic || r.Strategy == Reserve {
			fmt.Fprintf(&b, "   limiter: rounds %d, fetches %d, messages %d, script calls %d, waits %d, denied remote %d, denied local %d, evictions %d\n",
				d.Rounds, d.Fetches, d.Messages, d.ScriptCalls, d.Waits, d.DeniedRemote, d.DeniedLocal, d.Evictions)
		}
		if r.Strategy == Optimistic || r.Strategy == Reserve || r.Strategy == ReserveSharded {
			fmt.Fprintf(&b, "   failure policy: fallback allowed %d, fallback denied %d, breaker opens %d, round errors %d\n",
				d.FallbackAllowed, d.FallbackDenied, d.BreakerOpens, d.RoundErrors)
		}
		writeNodes(&b, r)
		if d.classes != nil {
			fmt.Fprintf(&b, "   %-16s %6s %9s %9s %9s %12s %12s %10s\n", "keys by demand", "keys", "demand", "admitted", "oracle", "msgs:decide", "msgs:round", "msgs/req")
			for _, c := range d.classes {
				per := 0.0
				if c.Demand > 0 {
					per = float64(c.Messages[phaseDecision]+c.Messages[phaseRound]) / float64(c.Demand)
				}
				fmt.Fprintf(&b, "   %-16s %6d %9d %9d %9d %12d %12d %10.3f\n", c.Name, c.Keys, c.Demand, c.Admitted, c.Oracle,
					c.Messages[phaseDecision], c.Messages[phaseRound], per)
			}
			writeKinds(&b, d.classes)
		}
		for _, side := range []struct {
			name string
			by   int
		}{{"over", 1}, {"under", -1}} {
			top := topKeys(r.perKey, 5, side.by)
			if len(top) == 0 {
				continue
			}
			fmt.Fprintf(&b, "   most %s-admitted keys (key demand admitted oracle):", side.name)
			for _, k := range top {
				fmt.Fprintf(&b, " %s %d %d %d;", keyName(k.Key), k.Demand, k.Admitted, k.Oracle)
			}
			fmt.Fprintln(&b)
		}
	}
	writeSplits(&b, rep.Results)
	_, err := w.Write(b.Bytes())
	return err
}

// writeNodes writes what each Redis node of r ran: key messages, calls,
// the CPU it spent (live), and the hottest key's messages (with
// Config.Detail).
func writeNodes(w io.Writer, r Result) {
	if len(r.Nodes) == 0 {
		return
	}
	fmt.Fprintf(w, "   nodes: key messages")
	for _, n := range r.Nodes {
		fmt.Fprintf(w, " %d", n.KeyMessages)
	}
	fmt.Fprintf(w, ", calls")
	for _, n := range r.Nodes {
		fmt.Fprintf(w, " %d", n.Calls)
	}
	if r.Nodes[0].RedisCPUNS != nil {
		fmt.Fprintf(w, ", redis cpu")
		for _, n := range r.Nodes {
			fmt.Fprintf(w, " %s", optCPU(n.RedisCPUNS))
		}
	}
	if hot, nodes := r.Diag.hottest(); nodes != nil {
		fmt.Fprintf(w, "; hottest key %s's messages", keyName(hot))
		for _, c := range nodes {
			fmt.Fprintf(w, " %d", c)
		}
	}
	fmt.Fprintln(w)
}

// writeSplits writes, for each reserve-sharded result with a reserve
// result at the same interval, what splitting hot keys did to the nodes
// (SplitEffect).
func writeSplits(w io.Writer, results []Result) {
	for _, split := range results {
		if split.Strategy != ReserveSharded {
			continue
		}
		for _, whole := range results {
			if whole.Strategy != Reserve || whole.interval() != split.interval() {
				continue
			}
			e, ok := SplitEffectOf(whole, split)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "\n== %s against %s\n", split.Label(), whole.Label())
			fmt.Fprintf(w, "   busiest node: key messages %d against %d (%.2f), calls %d against %d (%.2f)",
				e.Split.KeyMessages, e.Whole.KeyMessages, ratio(e.Split.KeyMessages, e.Whole.KeyMessages),
				e.Split.Calls, e.Whole.Calls, ratio(e.Split.Calls, e.Whole.Calls))
			if e.Split.RedisCPUNS != nil && e.Whole.RedisCPUNS != nil {
				fmt.Fprintf(w, ", redis cpu %s against %s (%.2f)", optCPU(e.Split.RedisCPUNS), optCPU(e.Whole.RedisCPUNS), *e.Split.RedisCPUNS / *e.Whole.RedisCPUNS)
			}
			fmt.Fprintln(w)
			if e.HotKey >= 0 {
				fmt.Fprintf(w, "   hottest key %s on its busiest node: key messages %d against %d (%.2f)\n",
					keyName(e.HotKey), e.HotKeySplit, e.HotKeyWhole, ratio(e.HotKeySplit, e.HotKeyWhole))
			}
		}
	}
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// SplitEffect is what splitting hot keys (reserve-sharded) did to the
// Redis nodes against the same stream decided with keys whole (reserve).
type SplitEffect struct {
	// Whole and Split are the busiest node of each run, the one that ran
	// the most key messages.
	Whole, Split NodeLoad
	// HotKey is the key the whole run's nodes ran the most messages of, -1
	// unless both runs counted in detail (Config.Detail); HotKeyWhole and
	// HotKeySplit are its messages on the node that ran the most of them
	// in each run: what a split is for, its busiest part's node against
	// the one node of the whole key.
	HotKey                   int
	HotKeyWhole, HotKeySplit int64
}

// SplitEffectOf compares split, a reserve-sharded result, with whole, the
// reserve result of the same stream and interval; false if either has no
// nodes.
func SplitEffectOf(whole, split Result) (SplitEffect, bool) {
	if len(whole.Nodes) == 0 || len(split.Nodes) == 0 {
		return SplitEffect{}, false
	}
	e := SplitEffect{Whole: busiest(whole.Nodes), Split: busiest(split.Nodes), HotKey: -1}
	if hot, nodes := whole.Diag.hottest(); nodes != nil && split.Diag.keyNodes != nil {
		e.HotKey, e.HotKeyWhole = hot, slices.Max(nodes)
		if parts := split.Diag.keyNodes[hot]; parts != nil {
			e.HotKeySplit = slices.Max(parts)
		}
	}
	return e, true
}

// busiest returns the node that ran the most key messages.
func busiest(nodes []NodeLoad) NodeLoad {
	b := nodes[0]
	for _, n := range nodes[1:] {
		if n.KeyMessages > b.KeyMessages {
			b = n
		}
	}
	return b
}

// writeKinds writes the hybrid limiters' sync messages per class of keys,
// by phase (on demand or in rounds) and kind.
func writeKinds(w io.Writer, rows []classRow) {
	var total msgCounts
	for _, c := range rows {
		for p := range total {
			for k := range total[p] {
				total[p][k] += c.Kinds[p][k]
			}
		}
	}
	if total == (msgCounts{}) {
		return
	}
	fmt.Fprintf(w, "   sync messages    ")
	for _, p := range []phase{phaseDecision, phaseRound} {
		for _, k := range allMsgKinds() {
			fmt.Fprintf(w, " %16s", p.String()+":"+k.String())
		}
	}
	fmt.Fprintln(w)
	for _, c := range append(rows[:len(rows):len(rows)], classRow{Name: "all", Kinds: total}) {
		fmt.Fprintf(w, "   %-16s ", c.Name)
		for _, p := range []phase{phaseDecision, phaseRound} {
			for _, k := range allMsgKinds() {
				fmt.Fprintf(w, " %16d", c.Kinds[p][k])
			}
		}
		fmt.Fprintln(w)
	}
}
