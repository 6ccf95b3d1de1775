package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
)

// sampleReport is a hand-made report: one strategy that does not sync, one
// that does, and one with the live-only fields.
func sampleReport() *Report {
	iv := 200.0
	rate, p50, p99 := 2.5e6, int64(120), int64(900)
	return &Report{Scenario: Hotspot, Mode: "virtual", Seed: 7, Results: []Result{
		{Strategy: Local, Instances: 8, Decisions: 1000, Admitted: 700, OracleAdmitted: 710, UndershootRatio: 0.014085},
		{Strategy: Reserve, SyncIntervalMS: &iv, Instances: 8, Decisions: 1000, Admitted: 709, OracleAdmitted: 710,
			OvershootRatio: 0.001, RedisCmds: 12, RedisCmdsPerDecision: 0.012, HottestSlotShare: 0.25},
		{Strategy: Exact, Instances: 8, Decisions: 1000, Admitted: 710, OracleAdmitted: 710, RedisCmds: 1000,
			RedisCmdsPerDecision: 1, HottestSlotShare: 0.1, DecisionsPerSec: &rate, DecisionP50NS: &p50, DecisionP99NS: &p99},
	}}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenario, Mode string
		Seed           uint64
		Results        []map[string]any
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Scenario != "hotspot" || got.Mode != "virtual" || got.Seed != 7 || len(got.Results) != 3 {
		t.Fatalf("report header = %+v", got)
	}
	for _, r := range got.Results {
		for _, f := range csvHeader { // every field, null or not
			if _, ok := r[f]; !ok {
				t.Errorf("%v: field %q missing", r["strategy"], f)
			}
		}
	}
	for _, f := range []string{"sync_interval_ms", "decisions_per_sec", "decision_p50_ns", "decision_p99_ns"} {
		if got.Results[0][f] != nil {
			t.Errorf("local: %s = %v, want null", f, got.Results[0][f])
		}
	}
	if got.Results[1]["sync_interval_ms"] != 200.0 || got.Results[2]["decision_p99_ns"] != 900.0 {
		t.Errorf("results = %v", got.Results)
	}
}

func TestWriteCSV(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || strings.Join(rows[0], ",") != strings.Join(csvHeader, ",") {
		t.Fatalf("CSV = %q", rows)
	}
	col := func(row int, name string) string { return rows[row][slices.Index(csvHeader, name)] }
	if col(1, "sync_interval_ms") != "" || col(2, "sync_interval_ms") != "200" ||
		col(2, "overshoot_ratio") != "0.001" || col(3, "decisions_per_sec") != "2.5e+06" {
		t.Errorf("CSV rows = %q", rows[1:])
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"strategy", "reserve  200ms", "0.10%", "1.41%", "0.0120"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "decisions/s") {
		t.Errorf("virtual table has live columns:\n%s", out)
	}
	rep := sampleReport()
	rep.Mode = "live"
	b.Reset()
	_ = rep.WriteTable(&b)
	if !strings.Contains(b.String(), "decisions/s") || !strings.Contains(b.String(), "2500000") {
		t.Errorf("live table:\n%s", b.String())
	}
}

func TestWriteSVG(t *testing.T) {
	for name, rep := range map[string]*Report{"sample": sampleReport(), "empty": {Scenario: Flash, Mode: "virtual"}} {
		var b bytes.Buffer
		if err := rep.WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		// Well-formed XML, with a point per result and series.
		d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
		circles := 0
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: SVG is not well-formed: %v\n%s", name, err, b.String())
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
				circles++
			}
		}
		if want := 2*len(rep.Results) + 2; circles != want { // two legend marks
			t.Errorf("%s: %d circles, want %d", name, circles, want)
		}
	}
}

// TestTinyRatioIsNotZero: one key admitted once more than the oracle out
// of three million has an overshoot of 3.3e-7, which rounding to six
// decimals to nearest printed as 0 beside admitted > oracle_admitted.
func TestTinyRatioIsNotZero(t *testing.T) {
	for _, tt := range []struct {
		name             string
		admitted, oracle int64
	}{
		{"overshoot", 3_000_001, 3_000_000},
		{"undershoot", 3_000_000, 3_000_001},
	} {
		per := []keyCount{{Key: 0, Demand: 4_000_000, Admitted: tt.admitted, Oracle: tt.oracle}}
		a := accuracy{Decisions: 4_000_000, Admitted: tt.admitted, OracleAdmitted: tt.oracle, perKey: per}
		a.Overshoot, a.Undershoot = overshootRatios(per)
		res := newResult(run{strategy: Local}, 8, a, nil)
		got, other := res.OvershootRatio, res.UndershootRatio
		if tt.name == "undershoot" {
			got, other = other, got
		}
		if got != 1e-6 || other != 0 {
			t.Errorf("%s: admitted %d, oracle %d: %s ratio %g (other %g), want 1e-06 (other 0)", tt.name, tt.admitted, tt.oracle, tt.name, got, other)
		}
		var b bytes.Buffer
		rep := &Report{Scenario: Hotspot, Mode: "virtual", Results: []Result{res}}
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if want := `"` + tt.name + `_ratio": 0.000001`; !strings.Contains(b.String(), want) {
			t.Errorf("%s: JSON lacks %s:\n%s", tt.name, want, b.String())
		}
		b.Reset()
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "<0.01%") {
			t.Errorf("%s: table shows a nonzero ratio as 0.00%%, want <0.01%%:\n%s", tt.name, b.String())
		}
	}
	// Zero stays zero, and a ratio that rounds to a nonzero value rounds
	// to nearest as before.
	for x, want := range map[float64]float64{0: 0, 1.4e-6: 1e-6, 0.0140845: 0.014085, -3e-7: -1e-6} {
		if got := round6(x); got != want {
			t.Errorf("round6(%g) = %g, want %g", x, got, want)
		}
	}
}
