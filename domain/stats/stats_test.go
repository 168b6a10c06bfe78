package stats_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/stats"
)

// randomPairs returns n items with scores in multiples of 1/8 (eight
// samples an item), BF16 at 0.5 or more, a four-way chance and format
// shares.
func randomPairs(seed uint64, n int) []stats.Pair {
	rng := rand.New(rand.NewPCG(seed, 1))
	ps := make([]stats.Pair, n)
	for i := range ps {
		ps[i] = stats.Pair{
			BF16:               float64(4+rng.IntN(5)) / 8, // above chance
			Candidate:          float64(rng.IntN(9)) / 8,
			Chance:             0.25,
			HasFormat:          true,
			BF16Formatted:      float64(rng.IntN(9)) / 8,
			CandidateFormatted: float64(rng.IntN(9)) / 8,
		}
	}
	return ps
}

// TestDomainHandExample checks every field of Domain on four items worked
// out by hand: differences 1, 0, 0, 0.25 with mean 0.3125 and squared
// deviations summing to 0.671875; BF16 scores 1, 1, 0, 0.5 with mean 0.625
// and squared deviations summing to 0.6875.
func TestDomainHandExample(t *testing.T) {
	ps := []stats.Pair{
		{BF16: 1, Candidate: 0, CandidateLost: true},
		{BF16: 1, Candidate: 1},
		{BF16: 0, Candidate: 0},
		{BF16: 0.5, Candidate: 0.25},
	}
	d, err := stats.Domain(ps)
	require.NoError(t, err)
	se := math.Sqrt(0.671875/3) / 2 // sd of the differences over sqrt(4)
	require.Equal(t, record.Domain{
		BF16:          0.625,
		BF16SE:        math.Sqrt(0.6875/3) / 2,
		CandidateLost: 0.25,
		Chance:        0,
		Drop:          0.3125,
		Headroom:      0.625,
		Items:         4,
		Quantized:     0.3125,
		Recovery:      0.5,
		RecoverySE:    se / 0.625,
		SE:            se,
		Status:        stats.StatusDiagnostic,
		Upper:         0.3125 + stats.Z*se,
	}, d)
	require.InDelta(t, 0.23662118, d.SE, 1e-8)
	require.Nil(t, d.FormatContract, "no format contract without HasFormat")
}

// TestDomainProperties checks the paired statistics on random items: a
// candidate identical to BF16 has drop 0, se 0 and recovery 1; swapping the
// roles negates the drop and keeps the se; Domain and Derive agree on the
// means' derived fields; format shares and the status threshold.
func TestDomainProperties(t *testing.T) {
	for _, n := range []int{2, 49, 50, 300, 1001} {
		ps := randomPairs(uint64(n), n)

		same := make([]stats.Pair, n)
		for i, p := range ps {
			p.Candidate, p.CandidateFormatted = p.BF16, p.BF16Formatted
			same[i] = p
		}
		d, err := stats.Domain(same)
		require.NoError(t, err)
		require.Zero(t, d.Drop, n)
		require.Zero(t, d.SE, n)
		require.Equal(t, 1.0, d.Recovery, n)
		require.Equal(t, d.BF16, d.Quantized, n)
		require.Equal(t, d.FormatContract.BF16, d.FormatContract.Quantized, n)
		require.Zero(t, d.CandidateLost, n)

		fwd, err := stats.Domain(ps)
		require.NoError(t, err)
		swapped := make([]stats.Pair, n)
		for i, p := range ps {
			p.BF16, p.Candidate = p.Candidate, p.BF16
			p.BF16Formatted, p.CandidateFormatted = p.CandidateFormatted, p.BF16Formatted
			swapped[i] = p
		}
		rev, err := stats.Domain(swapped)
		if err == nil {
			require.Equal(t, -fwd.Drop, rev.Drop, n)
			require.InDelta(t, fwd.SE, rev.SE, 1e-17, n)
			require.Equal(t, fwd.BF16, rev.Quantized, n)
			require.Equal(t, fwd.FormatContract.BF16, rev.FormatContract.Quantized, n)
		} else {
			require.ErrorIs(t, err, stats.ErrNoHeadroom, n)
		}

		// Derive from the same means: scores in multiples of 1/8 make the
		// sums exact, so the drop agrees bit for bit.
		m := stats.Means{BF16: fwd.BF16, Quantized: fwd.Quantized, SE: fwd.SE, BF16SE: fwd.BF16SE,
			Chance: fwd.Chance, Items: fwd.Items, FormatContract: fwd.FormatContract}
		der, err := stats.Derive(m)
		require.NoError(t, err)
		require.Equal(t, fwd, der, n)
		m.BF16, m.Quantized = m.Quantized, m.BF16
		m.Chance = 0
		back, err := stats.Derive(m)
		require.NoError(t, err)
		require.Equal(t, -fwd.Drop, back.Drop, "swapping the means negates the drop (n=%d)", n)

		want := stats.StatusValid
		if n < stats.MinItems {
			want = stats.StatusDiagnostic
		}
		require.Equal(t, want, fwd.Status, n)
		require.Equal(t, n, fwd.Items)
		require.Equal(t, 0.25, fwd.Chance)
		require.Equal(t, fwd.BF16-0.25, fwd.Headroom)
		require.Equal(t, fwd.Drop+float64(stats.Z*fwd.SE), fwd.Upper)
	}
}

func TestDomainErrors(t *testing.T) {
	good := func() []stats.Pair { return randomPairs(7, 60) }
	cases := []struct {
		name  string
		edit  func([]stats.Pair) []stats.Pair
		want  error
		match string
	}{
		{"empty", func([]stats.Pair) []stats.Pair { return nil }, stats.ErrEmpty, "no items"},
		{"one item", func(p []stats.Pair) []stats.Pair { return p[:1] }, stats.ErrTooFew, "1 item"},
		{"NaN bf16", func(p []stats.Pair) []stats.Pair { p[3].BF16 = math.NaN(); return p }, stats.ErrOutOfRange, "item 3: BF16 score NaN"},
		{"candidate above 1", func(p []stats.Pair) []stats.Pair { p[5].Candidate = 1.5; return p }, stats.ErrOutOfRange, "item 5: candidate score 1.5 outside [0, 1]"},
		{"negative candidate", func(p []stats.Pair) []stats.Pair { p[0].Candidate = -0.1; return p }, stats.ErrOutOfRange, "candidate score -0.1"},
		{"infinite bf16", func(p []stats.Pair) []stats.Pair { p[0].BF16 = math.Inf(1); return p }, stats.ErrOutOfRange, "BF16 score +Inf"},
		{"chance 1", func(p []stats.Pair) []stats.Pair { p[2].Chance = 1; return p }, stats.ErrOutOfRange, "chance 1 outside [0, 1)"},
		{"NaN format share", func(p []stats.Pair) []stats.Pair { p[4].CandidateFormatted = math.NaN(); return p }, stats.ErrOutOfRange, "candidate format share NaN"},
		{"mixed format", func(p []stats.Pair) []stats.Pair { p[9].HasFormat = false; return p }, stats.ErrMixedFormat, "item 9"},
		{"no headroom", func(p []stats.Pair) []stats.Pair {
			for i := range p {
				p[i].BF16, p[i].Chance = 0.25, 0.25
			}
			return p
		}, stats.ErrNoHeadroom, "bf16 0.25, chance 0.25"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := stats.Domain(c.edit(good()))
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.match)
		})
	}
}

func TestDeriveErrors(t *testing.T) {
	ok := stats.Means{BF16: 0.6, Quantized: 0.5, SE: 0.01, BF16SE: 0.02, Chance: 0.25, Items: 100}
	cases := []struct {
		name string
		edit func(*stats.Means)
		want error
	}{
		{"no items", func(m *stats.Means) { m.Items = 0 }, stats.ErrEmpty},
		{"NaN bf16", func(m *stats.Means) { m.BF16 = math.NaN() }, stats.ErrOutOfRange},
		{"quantized above 1", func(m *stats.Means) { m.Quantized = 1.01 }, stats.ErrOutOfRange},
		{"negative se", func(m *stats.Means) { m.SE = -1e-9 }, stats.ErrOutOfRange},
		{"NaN bf16_se", func(m *stats.Means) { m.BF16SE = math.NaN() }, stats.ErrOutOfRange},
		{"infinite se", func(m *stats.Means) { m.SE = math.Inf(1) }, stats.ErrOutOfRange},
		{"bf16 at chance", func(m *stats.Means) { m.BF16 = 0.25 }, stats.ErrNoHeadroom},
		{"bf16 below chance", func(m *stats.Means) { m.BF16 = 0.2 }, stats.ErrNoHeadroom},
	}
	_, err := stats.Derive(ok)
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := ok
			c.edit(&m)
			_, err := stats.Derive(m)
			require.ErrorIs(t, err, c.want)
		})
	}
}

func TestOverall(t *testing.T) {
	dom := func(drop, upper, rec, rse float64, status string) record.Domain {
		return record.Domain{Drop: drop, Upper: upper, Recovery: rec, RecoverySE: rse, Status: status}
	}
	domains := map[string]record.Domain{
		"b":      dom(0.01, 0.02, 0.99, 0.03, stats.StatusValid),
		"a":      dom(0.02, 0.04, 0.97, 0.04, stats.StatusValid),
		"expert": dom(0.30, 0.90, 0.10, 0.50, stats.StatusDiagnostic),
	}
	q, err := stats.Overall(domains)
	require.NoError(t, err)
	require.Equal(t, 2, q.ValidDomains)
	require.InDelta(t, 0.98, q.Recovery, 1e-15)
	require.InDelta(t, 0.025, q.RecoverySE, 1e-15, "sqrt(0.03² + 0.04²)/2")
	require.Equal(t, "a", q.WorstDomain, "the diagnostic domain is not the worst")
	require.Equal(t, 0.02, q.WorstDrop)
	require.Equal(t, 0.04, q.WorstUpper)
	require.Equal(t, stats.TierB, q.Tier)
	md, err := stats.MeanDrop(domains)
	require.NoError(t, err)
	require.Equal(t, 0.015, md)

	// A tie on upper goes to the first domain in sorted order.
	tie := map[string]record.Domain{"z": dom(0.01, 0.02, 1, 0, stats.StatusValid), "m": dom(0.015, 0.02, 1, 0, stats.StatusValid)}
	q, err = stats.Overall(tie)
	require.NoError(t, err)
	require.Equal(t, "m", q.WorstDomain)

	for name, in := range map[string]map[string]record.Domain{
		"empty":          {},
		"only diagnosis": {"expert": domains["expert"]},
	} {
		_, err := stats.Overall(in)
		require.ErrorIs(t, err, stats.ErrNoValidDomain, name)
		_, err = stats.MeanDrop(in)
		require.ErrorIs(t, err, stats.ErrNoValidDomain, name)
	}
	_, err = stats.Overall(map[string]record.Domain{"a": dom(0, math.NaN(), 1, 0, stats.StatusValid)})
	require.ErrorIs(t, err, stats.ErrOutOfRange)
}

func TestTierAndReason(t *testing.T) {
	cases := []struct {
		upper  float64
		tier   string
		reason string
	}{
		{-0.01, stats.TierA, ""},
		{0.029379995179421133, stats.TierA, ""},
		{0.03, stats.TierA, ""},
		{math.Nextafter(0.03, 1), stats.TierB, ""},
		{0.05, stats.TierB, ""},
		{math.Nextafter(0.05, 1), stats.TierFail, "quality tier fail below B"},
		{0.06736269865142268, stats.TierFail, "quality tier fail below B"},
		{math.NaN(), stats.TierFail, "quality tier fail below B"},
	}
	for _, c := range cases {
		require.Equal(t, c.tier, stats.Tier(c.upper), c.upper)
		require.Equal(t, c.reason, stats.Reason(c.tier), c.upper)
	}
}

func TestLength(t *testing.T) {
	// Hand example: means 15 and 10, R = 1.5, residuals -5 and 5, sample
	// variance 50, se = sqrt(50/2)/10.
	l, err := stats.Length([]int{10, 20}, []int{10, 10})
	require.NoError(t, err)
	require.Equal(t, record.Length{LengthGenerations: 2, LengthShift: 0.5, LengthShiftSE: 0.5, LengthTokens: 15, LengthTokensBF16: 10}, l)

	same := []int{100, 250, 37, 512, 3}
	l, err = stats.Length(same, same)
	require.NoError(t, err)
	require.Zero(t, l.LengthShift)
	require.Zero(t, l.LengthShiftSE)

	cases := []struct {
		name    string
		c, b    []int
		want    error
		message string
	}{
		{"mismatch", []int{1, 2}, []int{1}, stats.ErrMismatch, "2 candidate and 1 BF16"},
		{"empty", nil, nil, stats.ErrEmpty, "no generations"},
		{"one", []int{1}, []int{1}, stats.ErrTooFew, "1 generation"},
		{"negative", []int{1, -1}, []int{1, 1}, stats.ErrOutOfRange, "generation 1"},
		{"no BF16 tokens", []int{1, 1}, []int{0, 0}, stats.ErrOutOfRange, "no tokens"},
	}
	for _, c := range cases {
		_, err := stats.Length(c.c, c.b)
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorContains(t, err, c.message, c.name)
	}
}

// softmaxTopK returns the k most likely tokens of softmax(logits) as a
// TopK over tokens "t0", "t1", ....
func softmaxTopK(logits []float64, k int) stats.TopK {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, l)
	}
	z := 0.0
	for _, l := range logits {
		z += math.Exp(l - mx)
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	for i := 0; i < k; i++ { // partial selection sort: k is small
		for j := i + 1; j < len(idx); j++ {
			if logits[idx[j]] > logits[idx[i]] {
				idx[i], idx[j] = idx[j], idx[i]
			}
		}
	}
	t := stats.TopK{}
	for _, i := range idx[:k] {
		t[tok(i)] = logits[i] - mx - math.Log(z)
	}
	return t
}

func tok(i int) string { return "t" + string(rune('a'+i%26)) + string(rune('a'+i/26)) }

func TestTokenKL(t *testing.T) {
	// Full distributions over two tokens: the textbook KL.
	p := stats.TopK{"a": math.Log(0.5), "b": math.Log(0.5)}
	q := stats.TopK{"a": math.Log(0.25), "b": math.Log(0.75)}
	kl, err := stats.TokenKL(p, q)
	require.NoError(t, err)
	require.InDelta(t, 0.5*math.Log(2)+0.5*math.Log(2.0/3), kl, 1e-12)

	// Disjoint top-1 lists: each side's unlisted token gets half of its
	// outside mass 0.1, and other the rest:
	// P = (a .9, b .05, other .05), Q = (a .05, b .9, other .05).
	kl, err = stats.TokenKL(stats.TopK{"a": math.Log(0.9)}, stats.TopK{"b": math.Log(0.9)})
	require.NoError(t, err)
	require.InDelta(t, 0.85*math.Log(18), kl, 1e-12)

	// An unlisted token is capped at the side's smallest listed probability.
	kl, err = stats.TokenKL(stats.TopK{"a": math.Log(0.1)}, stats.TopK{"a": math.Log(0.1), "b": math.Log(0.05)})
	require.NoError(t, err)
	// P = (a .1, b .1, other .8), Q = (a .1, b .05, other .85).
	require.InDelta(t, 0.1*math.Log(2)+0.8*math.Log(0.8/0.85), kl, 1e-12)

	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range []int{5, 20, 64} {
		logits := make([]float64, 64)
		dir := make([]float64, 64)
		for i := range logits {
			logits[i] = 3 * rng.NormFloat64()
			dir[i] = rng.NormFloat64()
		}
		base := softmaxTopK(logits, k)
		same, err := stats.TokenKL(base, softmaxTopK(logits, k))
		require.NoError(t, err)
		require.Zero(t, same, "identical distributions (k=%d)", k)

		prev := 0.0
		for _, eps := range []float64{0.01, 0.05, 0.1, 0.3, 1, 3} {
			moved := make([]float64, len(logits))
			for i := range moved {
				moved[i] = logits[i] + eps*dir[i]
			}
			kl, err := stats.TokenKL(base, softmaxTopK(moved, k))
			require.NoError(t, err)
			require.GreaterOrEqual(t, kl, 0.0)
			require.Greater(t, kl, prev, "KL grows with the perturbation (k=%d, eps=%v)", k, eps)
			prev = kl
		}
	}

	for i := 0; i < 200; i++ {
		a := make([]float64, 30)
		b := make([]float64, 30)
		for j := range a {
			a[j], b[j] = 2*rng.NormFloat64(), 2*rng.NormFloat64()
		}
		kl, err := stats.TokenKL(softmaxTopK(a, 1+i%10), softmaxTopK(b, 1+i%7))
		require.NoError(t, err)
		require.GreaterOrEqual(t, kl, 0.0)
	}
}

func TestTokenKLErrors(t *testing.T) {
	ok := stats.TopK{"a": math.Log(0.5)}
	cases := []struct {
		name string
		p, q stats.TopK
		want error
		msg  string
	}{
		{"empty BF16", stats.TopK{}, ok, stats.ErrEmpty, "BF16 top-k"},
		{"empty candidate", ok, nil, stats.ErrEmpty, "candidate top-k"},
		{"NaN", stats.TopK{"a": math.NaN()}, ok, stats.ErrDistribution, `token "a" has logprob NaN`},
		{"positive logprob", ok, stats.TopK{"x": 0.5}, stats.ErrDistribution, "logprob 0.5"},
		{"mass above 1", stats.TopK{"a": math.Log(0.7), "b": math.Log(0.7)}, ok, stats.ErrDistribution, "exceeds 1"},
	}
	for _, c := range cases {
		_, err := stats.TokenKL(c.p, c.q)
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorContains(t, err, c.msg, c.name)
	}
	// -Inf is a probability of 0, and rounding just above 0 is tolerated.
	_, err := stats.TokenKL(stats.TopK{"a": math.Inf(-1), "b": 1e-7}, ok)
	require.NoError(t, err)
}

func TestKL(t *testing.T) {
	p := stats.TopK{"a": math.Log(0.5), "b": math.Log(0.5)}
	q := stats.TopK{"a": math.Log(0.25), "b": math.Log(0.75)}
	r := stats.TopK{"a": math.Log(0.9), "b": math.Log(0.1)}
	x, err := stats.TokenKL(p, q)
	require.NoError(t, err)
	y, err := stats.TokenKL(p, r)
	require.NoError(t, err)
	same := stats.Position{BF16: p, Candidate: p}
	seqs := []stats.Sequence{
		{{BF16: p, Candidate: q}, {BF16: p, Candidate: q}}, // mean x
		{{BF16: p, Candidate: r}},                          // mean y
		{same, same, same},                                 // mean 0
	}
	k, err := stats.KL(seqs)
	require.NoError(t, err)
	means := []float64{x, y, 0}
	mean := (x + y) / 3
	ss := 0.0
	for _, m := range means {
		ss += (m - mean) * (m - mean)
	}
	require.Equal(t, 3, k.Sequences)
	require.Equal(t, 6, k.Tokens)
	require.InDelta(t, mean, k.KL, 1e-15)
	require.InDelta(t, (2*x+y)/6, k.KLPerToken, 1e-15)
	require.Equal(t, math.Min(x, y), k.KLMedian, "median of x, y and 0")
	require.InDelta(t, math.Sqrt(ss/2)/math.Sqrt(3), k.KLSE, 1e-15)

	k, err = stats.KL(seqs[:2])
	require.NoError(t, err)
	require.InDelta(t, (x+y)/2, k.KLMedian, 1e-15, "even count: mean of the middle two")

	k, err = stats.KL([]stats.Sequence{{same}, {same, same}})
	require.NoError(t, err)
	require.Equal(t, record.KL{Sequences: 2, Tokens: 3}, k, "identical distributions")

	_, err = stats.KL(nil)
	require.ErrorIs(t, err, stats.ErrEmpty)
	_, err = stats.KL(seqs[:1])
	require.ErrorIs(t, err, stats.ErrTooFew)
	_, err = stats.KL([]stats.Sequence{seqs[0], {}})
	require.ErrorIs(t, err, stats.ErrEmpty)
	require.ErrorContains(t, err, "sequence 1 has no positions")
	_, err = stats.KL([]stats.Sequence{seqs[0], {{BF16: p, Candidate: stats.TopK{"a": 1}}}})
	require.ErrorIs(t, err, stats.ErrDistribution)
	require.ErrorContains(t, err, "sequence 1 position 0: candidate top-k")
}

// TestPercentile: numpy's linear interpolation between closest ranks.
func TestPercentile(t *testing.T) {
	t.Parallel()
	xs := []float64{4, 1, 3, 2}
	// numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97
	require.InDelta(t, 2.5, stats.Percentile(xs, 50), 1e-12)
	require.InDelta(t, 3.7, stats.Percentile(xs, 90), 1e-12)
	require.InDelta(t, 3.97, stats.Percentile(xs, 99), 1e-12)
	require.Equal(t, 0.0, stats.Percentile(nil, 50))
	require.Equal(t, []float64{4, 1, 3, 2}, xs, "the input is not reordered")
}
