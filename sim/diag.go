package sim

import (
	"bytes"
	"fmt"
	"io"
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
	_, err := w.Write(b.Bytes())
	return err
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
