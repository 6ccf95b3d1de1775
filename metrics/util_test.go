package metrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// filtered is a collector of the metrics of c named name whose label
// values (in label-name order) are values; it lets testutil.ToFloat64 pick
// one series out of a collector.
type filtered struct {
	c      prometheus.Collector
	name   string
	values []string
}

func onlyMetric(c prometheus.Collector, name string) prometheus.Collector {
	return filtered{c: c, name: name}
}

func labelled(c prometheus.Collector, name string, values ...string) prometheus.Collector {
	return filtered{c: c, name: name, values: values}
}

func (f filtered) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() {
		f.c.Collect(all)
		close(all)
	}()
	for m := range all {
		if !strings.Contains(m.Desc().String(), `fqName: "`+f.name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			panic(err)
		}
		var vals []string
		for _, lp := range pb.GetLabel() {
			if !slices.Contains(constLabelNames, lp.GetName()) {
				vals = append(vals, lp.GetValue())
			}
		}
		if f.values == nil || slices.Equal(vals, f.values) {
			ch <- m
		}
	}
}

// constLabelNames are the constant labels the tests use, left out of the
// variable label values a filter matches.
var constLabelNames = []string{"instance_name", "limiter_name"}
