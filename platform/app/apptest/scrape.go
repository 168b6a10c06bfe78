package apptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ConsumedTotal is the Prometheus name of the bus's processed-message
// counter (lowbarena.events.consumed, labels consumer, type, outcome).
const ConsumedTotal = "lowbarena_events_consumed_total"

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape reads a Prometheus /metrics endpoint (url, e.g.
// http://127.0.0.1:9464/metrics) in the text exposition format, as
// Prometheus itself asks for it, and parses it. It is not a test helper
// only: the cluster harness scrapes its service processes with it.
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scrape %s: %s: %s", url, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: parse the text format: %w", url, err)
	}
	return Families(fams), nil
}

// Sum adds the values of family name's samples whose labels include every
// pair of match (nil matches all): a counter's or gauge's value, a
// histogram's or summary's sample count. ok is false when the scrape has
// no such family (an OpenTelemetry instrument appears at its first
// measurement).
func (f Families) Sum(name string, match map[string]string) (sum float64, ok bool) {
	fam, ok := f[name]
	if !ok {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !matches(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, true
}

// By sums family name by the value of label: the bus's consumed messages
// by consumer, say.
func (f Families) By(name, label string) map[string]float64 {
	out := map[string]float64{}
	fam, ok := f[name]
	if !ok {
		return out
	}
	for _, m := range fam.GetMetric() {
		v := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				v = l.GetValue()
			}
		}
		s, _ := Families{name: &dto.MetricFamily{Name: fam.Name, Type: fam.Type, Metric: []*dto.Metric{m}}}.Sum(name, nil)
		out[v] += s
	}
	return out
}

// Names lists the families' names, sorted.
func (f Families) Names() []string {
	out := make([]string, 0, len(f))
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func matches(m *dto.Metric, match map[string]string) bool {
	for k, want := range match {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Consumed scrapes the /metrics endpoint at url and returns how many
// messages the process's bus has consumed since it started: the sum of
// ConsumedTotal over every consumer, type and outcome (0 before the
// first).
func Consumed(ctx context.Context, url string) (float64, error) {
	fams, err := Scrape(ctx, url)
	if err != nil {
		return 0, err
	}
	n, _ := fams.Sum(ConsumedTotal, nil)
	return n, nil
}
