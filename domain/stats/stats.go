// Package stats holds the quality stage's arithmetic: the paired per-domain
// statistics of a candidate against the BF16 reference, their aggregates
// over the valid domains and the quality tier, the generation-length shift,
// and the top-k KL divergence from BF16. Every function is pure and follows
// the arena's records (seed formulas §1, §2 and §7); the golden tests
// recompute the fixtures' derived fields from their recorded inputs.
//
// Float expressions that the records reproduce bit-exactly are written with
// explicit float64 conversions around products, so that no compiler fuses a
// multiply and an add into one rounding (the Go spec allows that fusion on
// some architectures).
package stats

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/lowbarena/lowbarena/domain/record"
)

// Z is the one-sided 95% normal quantile the records use for a domain's
// upper bound on the drop: exactly 1.645, not 1.6448536.
const Z = 1.645

// MinItems is the fewest items a domain needs to count: a domain with fewer
// items has status StatusDiagnostic and is left out of every aggregate.
const MinItems = 50

// Domain status values.
const (
	// StatusValid marks a domain that enters the aggregates.
	StatusValid = "valid"
	// StatusDiagnostic marks a domain that is reported but enters no
	// aggregate (too few items, see MinItems).
	StatusDiagnostic = "R5_diagnostic"
)

// Quality tiers and the worst upper bounds that reach them.
const (
	// TierA is reached when the worst valid domain's upper bound is at most
	// TierALimit.
	TierA = "A"
	// TierB is reached when the worst upper bound is at most TierBLimit.
	TierB = "B"
	// TierFail is every worse result.
	TierFail = "fail"
	// TierALimit is the largest worst upper bound of tier A.
	TierALimit = 0.03
	// TierBLimit is the largest worst upper bound of tier B.
	TierBLimit = 0.05
)

// MinProb is the floor to which the KL clamps every bucket probability
// before it takes a logarithm, so that no term is log(0).
const MinProb = 1e-12

// Errors callers can match with errors.Is; every error the package returns
// wraps one of them.
var (
	// ErrEmpty is returned for a domain, length or KL input with no data.
	ErrEmpty = errors.New("stats: no data")
	// ErrTooFew is returned when a standard error needs a second
	// observation.
	ErrTooFew = errors.New("stats: at least two observations are needed for a standard error")
	// ErrOutOfRange is returned for a score, share, chance or count that is
	// NaN, infinite or outside its range.
	ErrOutOfRange = errors.New("stats: value out of range")
	// ErrNoHeadroom is returned when the BF16 score does not exceed chance,
	// so that recovery is undefined.
	ErrNoHeadroom = errors.New("stats: BF16 score does not exceed chance, recovery is undefined")
	// ErrMixedFormat is returned when some items of a domain carry format
	// shares and others do not.
	ErrMixedFormat = errors.New("stats: format shares on some items of a domain but not on all")
	// ErrNoValidDomain is returned when no domain has status StatusValid.
	ErrNoValidDomain = errors.New("stats: no valid domain")
	// ErrMismatch is returned when paired inputs differ in length.
	ErrMismatch = errors.New("stats: paired inputs differ in length")
	// ErrDistribution is returned for a top-k list that is not part of a
	// probability distribution.
	ErrDistribution = errors.New("stats: not a probability distribution")
)

// Pair is one eval item scored on BF16 and on the candidate.
type Pair struct {
	// BF16 and Candidate are the item's scores in [0, 1]: the mean over the
	// item's samples.
	BF16, Candidate float64
	// Chance is the score of a uniform guess, 1/#choices for a
	// multiple-choice item and 0 otherwise; it is in [0, 1).
	Chance float64
	// HasFormat reports whether the domain's grader has a format contract;
	// the two shares below are read only when it is true, and it must be
	// the same for every item of a domain.
	HasFormat bool
	// BF16Formatted and CandidateFormatted are the shares in [0, 1] of the
	// item's samples that answered in the required format.
	BF16Formatted, CandidateFormatted float64
	// CandidateLost reports that the candidate produced no gradeable answer
	// for the item (an empty reply or an error).
	CandidateLost bool
}

// Means is a domain summarised by its means and standard errors: what the
// records keep, and what Derive turns into the derived fields.
type Means struct {
	// BF16 and Quantized are the mean item scores.
	BF16, Quantized float64
	// SE is the paired standard error of the drop; BF16SE the standard
	// error of the BF16 score.
	SE, BF16SE float64
	// Chance is the mean chance score of the items.
	Chance float64
	// Items is how many items the domain has.
	Items int
	// FormatContract is copied to the result; nil when the grader has no
	// format contract.
	FormatContract *record.FormatContract
	// CandidateLost is the share of items lost, copied to the result.
	CandidateLost float64
}

// Domain computes a domain's statistics from its paired items: bf16 and
// quantized are the mean item scores, drop is the mean of the per-item
// differences bf16_i - candidate_i, se the sample standard deviation (n-1
// denominator) of those differences over sqrt(n), bf16_se the same of the
// BF16 scores, chance the mean item chance, format_contract the mean format
// shares, candidate_lost the share of lost items, and the derived fields as
// Derive documents them. It returns ErrEmpty for no items, ErrTooFew for one
// item, ErrOutOfRange for a NaN or out-of-range score, share or chance,
// ErrMixedFormat for inconsistent format flags, and ErrNoHeadroom when the
// BF16 mean does not exceed the mean chance.
func Domain(pairs []Pair) (record.Domain, error) {
	n := len(pairs)
	if n == 0 {
		return record.Domain{}, fmt.Errorf("%w: domain has no items", ErrEmpty)
	}
	if n < 2 {
		return record.Domain{}, fmt.Errorf("%w: domain has 1 item", ErrTooFew)
	}
	hasFormat := pairs[0].HasFormat
	var sumB, sumC, sumD, sumCh, sumFB, sumFC float64
	lost := 0
	for i := range pairs {
		p := &pairs[i]
		if err := checkUnit("BF16 score", i, p.BF16); err != nil {
			return record.Domain{}, err
		}
		if err := checkUnit("candidate score", i, p.Candidate); err != nil {
			return record.Domain{}, err
		}
		if !(p.Chance >= 0 && p.Chance < 1) {
			return record.Domain{}, fmt.Errorf("%w: item %d: chance %v outside [0, 1)", ErrOutOfRange, i, p.Chance)
		}
		if p.HasFormat != hasFormat {
			return record.Domain{}, fmt.Errorf("%w: item %d has HasFormat %t, item 0 has %t", ErrMixedFormat, i, p.HasFormat, hasFormat)
		}
		if hasFormat {
			if err := checkUnit("BF16 format share", i, p.BF16Formatted); err != nil {
				return record.Domain{}, err
			}
			if err := checkUnit("candidate format share", i, p.CandidateFormatted); err != nil {
				return record.Domain{}, err
			}
			sumFB += p.BF16Formatted
			sumFC += p.CandidateFormatted
		}
		sumB += p.BF16
		sumC += p.Candidate
		sumD += p.BF16 - p.Candidate
		sumCh += p.Chance
		if p.CandidateLost {
			lost++
		}
	}
	fn := float64(n)
	meanB, meanD := sumB/fn, sumD/fn
	// Second pass: squared deviations from the means, which keeps the
	// variance accurate when the scores are close to their mean.
	var ssB, ssD float64
	for i := range pairs {
		eb := pairs[i].BF16 - meanB
		ed := (pairs[i].BF16 - pairs[i].Candidate) - meanD
		ssB += float64(eb * eb)
		ssD += float64(ed * ed)
	}
	m := Means{
		BF16:          meanB,
		Quantized:     sumC / fn,
		SE:            math.Sqrt(ssD/(fn-1)) / math.Sqrt(fn),
		BF16SE:        math.Sqrt(ssB/(fn-1)) / math.Sqrt(fn),
		Chance:        sumCh / fn,
		Items:         n,
		CandidateLost: float64(lost) / fn,
	}
	if hasFormat {
		m.FormatContract = &record.FormatContract{BF16: sumFB / fn, Quantized: sumFC / fn}
	}
	return derive(m, meanD)
}

// Derive computes a domain's derived fields from its means, as the records
// do: headroom = bf16 - chance; drop = (bf16*items - quantized*items)/items,
// the mean of the per-item differences recovered from the means (it can
// differ from bf16 - quantized in the last bit); recovery = (quantized -
// chance)/headroom; upper = drop + Z*se; recovery_se = se/headroom; status
// StatusDiagnostic when items < MinItems and StatusValid otherwise. The
// means, se, bf16_se, chance, items, format_contract and candidate_lost are
// copied. A headroom of zero or less is an error (ErrNoHeadroom) rather than
// a recovery of 1 or ±Inf: a reference that does not beat chance leaves
// nothing to recover, and the caller decides how to report the domain.
func Derive(m Means) (record.Domain, error) {
	if m.Items < 1 {
		return record.Domain{}, fmt.Errorf("%w: domain has %d items", ErrEmpty, m.Items)
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"bf16", m.BF16}, {"quantized", m.Quantized}, {"chance", m.Chance}, {"candidate_lost", m.CandidateLost}} {
		if !(v.x >= 0 && v.x <= 1) {
			return record.Domain{}, fmt.Errorf("%w: %s %v outside [0, 1]", ErrOutOfRange, v.name, v.x)
		}
	}
	n := float64(m.Items)
	return derive(m, (float64(m.BF16*n)-float64(m.Quantized*n))/n)
}

// derive fills a record.Domain from m and the drop; it checks the standard
// errors and the headroom.
func derive(m Means, drop float64) (record.Domain, error) {
	for _, v := range []struct {
		name string
		x    float64
	}{{"se", m.SE}, {"bf16_se", m.BF16SE}} {
		if !(v.x >= 0 && !math.IsInf(v.x, 1)) {
			return record.Domain{}, fmt.Errorf("%w: %s %v is not a finite standard error", ErrOutOfRange, v.name, v.x)
		}
	}
	headroom := m.BF16 - m.Chance
	if !(headroom > 0) {
		return record.Domain{}, fmt.Errorf("%w: bf16 %v, chance %v", ErrNoHeadroom, m.BF16, m.Chance)
	}
	status := StatusValid
	if m.Items < MinItems {
		status = StatusDiagnostic
	}
	return record.Domain{
		BF16:           m.BF16,
		BF16SE:         m.BF16SE,
		CandidateLost:  m.CandidateLost,
		Chance:         m.Chance,
		Drop:           drop,
		FormatContract: m.FormatContract,
		Headroom:       headroom,
		Items:          m.Items,
		Quantized:      m.Quantized,
		Recovery:       (m.Quantized - m.Chance) / headroom,
		RecoverySE:     m.SE / headroom,
		SE:             m.SE,
		Status:         status,
		Upper:          drop + float64(Z*m.SE),
	}, nil
}

// checkUnit reports a value of item i that is NaN or outside [0, 1].
func checkUnit(what string, i int, x float64) error {
	if !(x >= 0 && x <= 1) {
		return fmt.Errorf("%w: item %d: %s %v outside [0, 1]", ErrOutOfRange, i, what, x)
	}
	return nil
}

// ValidDomains returns the names of the domains with status StatusValid, in
// sorted order: the order in which every aggregate visits them.
func ValidDomains(domains map[string]record.Domain) []string {
	var v []string
	for name, d := range domains {
		if d.Status == StatusValid {
			v = append(v, name)
		}
	}
	slices.Sort(v)
	return v
}

// Overall aggregates the domains over the valid ones (ValidDomains; a
// StatusDiagnostic domain enters no aggregate): valid_domains is their
// count k; recovery is the sum of their recoveries over k, in sorted order;
// recovery_se is the standard error of that mean for independent domains,
// sqrt(Σ (recovery_se_d/k)²) summed in sorted order (Python's
// math.hypot(*rse)/k gives the same value on the fixtures, but folding Go's
// two-argument math.Hypot and dividing by k is 1 ulp off on one of them, as
// is sqrt(Σ rse_d²)/k); worst_domain
// is the one with the largest upper bound (the first in sorted order on a
// tie), worst_drop and worst_upper its drop and upper; tier is
// Tier(worst_upper). Domains is the given map. Evaluations, first_quality,
// length and reference_rows are left to the caller. It returns
// ErrNoValidDomain when no domain is valid.
func Overall(domains map[string]record.Domain) (record.Quality, error) {
	valid := ValidDomains(domains)
	if len(valid) == 0 {
		return record.Quality{}, fmt.Errorf("%w among %d domains", ErrNoValidDomain, len(domains))
	}
	k := float64(len(valid))
	var sumRec, sumSq float64
	worst := valid[0]
	for _, name := range valid {
		d := domains[name]
		if math.IsNaN(d.Upper) || math.IsNaN(d.Recovery) || math.IsNaN(d.RecoverySE) {
			return record.Quality{}, fmt.Errorf("%w: domain %s has a NaN upper, recovery or recovery_se", ErrOutOfRange, name)
		}
		sumRec += d.Recovery
		r := d.RecoverySE / k
		sumSq += float64(r * r)
		if d.Upper > domains[worst].Upper {
			worst = name
		}
	}
	w := domains[worst]
	return record.Quality{
		Domains:      domains,
		Recovery:     sumRec / k,
		RecoverySE:   math.Sqrt(sumSq),
		Tier:         Tier(w.Upper),
		ValidDomains: len(valid),
		WorstDomain:  worst,
		WorstDrop:    w.Drop,
		WorstUpper:   w.Upper,
	}, nil
}

// MeanDrop is the mean drop over the valid domains, rounded to 5 decimals
// as the dev score records it. It returns ErrNoValidDomain when no domain
// is valid.
func MeanDrop(domains map[string]record.Domain) (float64, error) {
	valid := ValidDomains(domains)
	if len(valid) == 0 {
		return 0, fmt.Errorf("%w among %d domains", ErrNoValidDomain, len(domains))
	}
	s := 0.0
	for _, name := range valid {
		s += domains[name].Drop
	}
	return round(s/float64(len(valid)), 5), nil
}

// Tier is the quality tier of a worst upper bound: TierA up to TierALimit,
// TierB up to TierBLimit, TierFail above (and for NaN).
func Tier(worstUpper float64) string {
	switch {
	case worstUpper <= TierALimit:
		return TierA
	case worstUpper <= TierBLimit:
		return TierB
	default:
		return TierFail
	}
}

// Reason is the dev score's reason for a tier: "quality tier fail below B"
// for TierFail and the empty string for a passing tier.
func Reason(tier string) string {
	if tier == TierFail {
		return fmt.Sprintf("quality tier %s below %s", tier, TierB)
	}
	return ""
}

// round rounds half away from zero to dp decimals.
func round(x float64, dp int) float64 {
	p := math.Pow(10, float64(dp))
	return math.Round(x*p) / p
}

// Length compares the output lengths of the candidate's generations with
// BF16's on the same prompts, paired by index: length_generations is their
// number n, length_tokens and length_tokens_bf16 the total tokens over n,
// and length_shift = length_tokens/length_tokens_bf16 - 1.
//
// length_shift_se is the delta-method standard error of that ratio of
// paired means: with R = mean(c)/mean(b), it is sqrt(s²/n)/mean(b), where s²
// is the sample variance (n-1 denominator) of the per-generation residuals
// c_i - R*b_i. The records' length_shift_se cannot be checked against this:
// it needs the per-generation lengths, which they do not keep.
//
// It returns ErrMismatch for inputs of different lengths, ErrEmpty for none,
// ErrTooFew for one generation, and ErrOutOfRange for a negative count or
// BF16 generations with no tokens at all.
func Length(candidate, bf16 []int) (record.Length, error) {
	if len(candidate) != len(bf16) {
		return record.Length{}, fmt.Errorf("%w: %d candidate and %d BF16 generations", ErrMismatch, len(candidate), len(bf16))
	}
	n := len(candidate)
	if n == 0 {
		return record.Length{}, fmt.Errorf("%w: no generations", ErrEmpty)
	}
	if n < 2 {
		return record.Length{}, fmt.Errorf("%w: 1 generation", ErrTooFew)
	}
	var totC, totB int64
	for i := range candidate {
		if candidate[i] < 0 || bf16[i] < 0 {
			return record.Length{}, fmt.Errorf("%w: generation %d: negative token count (%d, %d)", ErrOutOfRange, i, candidate[i], bf16[i])
		}
		totC += int64(candidate[i])
		totB += int64(bf16[i])
	}
	if totB == 0 {
		return record.Length{}, fmt.Errorf("%w: BF16 generations have no tokens", ErrOutOfRange)
	}
	fn := float64(n)
	lc, lb := float64(totC)/fn, float64(totB)/fn
	ratio := lc / lb
	ss := 0.0
	for i := range candidate {
		e := float64(candidate[i]) - float64(ratio*float64(bf16[i]))
		ss += float64(e * e)
	}
	return record.Length{
		LengthGenerations: n,
		LengthShift:       ratio - 1,
		LengthShiftSE:     math.Sqrt(ss/(fn-1)/fn) / lb,
		LengthTokens:      lc,
		LengthTokensBF16:  lb,
	}, nil
}

// TopK is one token position's top-k distribution: token -> natural-log
// probability (0 or less; -Inf is a probability of 0).
type TopK map[string]float64

// Position is one token position of a shared sequence, as BF16 and the
// candidate saw it.
type Position struct {
	BF16, Candidate TopK
}

// Sequence is the token positions of one shared sequence.
type Sequence []Position

// logprobSlack is how far above 0 a logprob, and how far above 1 a top-k
// mass, may be from rounding in the engine before they are rejected.
const logprobSlack = 1e-4

// TokenKL is KL(bf16 || candidate) in nats at one token position, over the
// buckets U ∪ {other}, where U is the union of both top-k lists and other
// is everything else. On each side a token of its own top-k has its
// probability exp(logprob); the side's outside mass r = 1 - Σ exp(logprob)
// (0 if rounding makes it negative) holds the tokens of U it did not list
// and its other bucket. Each such unlisted token gets min(r/(m+1), p_min),
// where m is how many tokens of U the side did not list and p_min its
// smallest listed probability (a token outside a top-k is no likelier than
// the tokens in it), and other gets what remains of r. Each bucket
// probability is clamped to at least MinProb before its logarithm, and the
// sum is clamped to 0 from below against rounding. Identical lists give
// exactly 0. It returns ErrEmpty for an empty list and ErrDistribution for
// a NaN or positive logprob or a list whose mass exceeds 1.
func TokenKL(bf16, candidate TopK) (float64, error) {
	// Every sum runs in sorted token order, so that the result does not
	// depend on map iteration order.
	pKeys, qKeys := sortedKeys(bf16), sortedKeys(candidate)
	pOut, pMin, err := mass(bf16, pKeys)
	if err != nil {
		return 0, fmt.Errorf("BF16 top-k: %w", err)
	}
	qOut, qMin, err := mass(candidate, qKeys)
	if err != nil {
		return 0, fmt.Errorf("candidate top-k: %w", err)
	}
	mp, mq := 0, 0 // tokens of U that BF16 (mp) and the candidate (mq) did not list
	for _, tok := range qKeys {
		if _, ok := bf16[tok]; !ok {
			mp++
		}
	}
	for _, tok := range pKeys {
		if _, ok := candidate[tok]; !ok {
			mq++
		}
	}
	pFill := math.Min(pOut/float64(mp+1), pMin)
	qFill := math.Min(qOut/float64(mq+1), qMin)
	kl := 0.0
	for _, tok := range pKeys {
		q := qFill
		if lq, ok := candidate[tok]; ok {
			q = prob(lq)
		}
		kl += term(prob(bf16[tok]), q)
	}
	for _, tok := range qKeys {
		if _, ok := bf16[tok]; !ok {
			kl += term(pFill, prob(candidate[tok]))
		}
	}
	kl += term(pOut-float64(mp)*pFill, qOut-float64(mq)*qFill)
	return math.Max(kl, 0), nil
}

// sortedKeys returns the tokens of t in sorted order.
func sortedKeys(t TopK) []string {
	keys := make([]string, 0, len(t))
	for tok := range t {
		keys = append(keys, tok)
	}
	slices.Sort(keys)
	return keys
}

// prob is the probability of a logprob, with rounding above 0 taken as 0.
func prob(lp float64) float64 { return math.Exp(math.Min(lp, 0)) }

// mass checks a top-k list and returns its outside mass and its smallest
// listed probability, summing in the order of keys.
func mass(t TopK, keys []string) (out, minP float64, err error) {
	if len(t) == 0 {
		return 0, 0, fmt.Errorf("%w: empty top-k list", ErrEmpty)
	}
	s, minP := 0.0, 1.0
	for _, tok := range keys {
		lp := t[tok]
		if math.IsNaN(lp) || lp > logprobSlack {
			return 0, 0, fmt.Errorf("%w: token %q has logprob %v", ErrDistribution, tok, lp)
		}
		p := prob(lp)
		s += p
		minP = math.Min(minP, p)
	}
	if s > 1+logprobSlack {
		return 0, 0, fmt.Errorf("%w: top-k mass %v exceeds 1", ErrDistribution, s)
	}
	return math.Max(1-s, 0), minP, nil
}

// term is one bucket's p*log(p/q), 0 when p is 0, with p and q clamped to
// MinProb.
func term(p, q float64) float64 {
	if p <= 0 {
		return 0
	}
	p, q = math.Max(p, MinProb), math.Max(q, MinProb)
	return p * math.Log(p/q)
}

// KL summarises the per-token KL(bf16 || candidate) (TokenKL) over shared
// sequences: kl is the mean over sequences of each sequence's mean KL,
// kl_per_token the mean over all tokens, kl_median the median of the
// sequence means (the mean of the middle two for an even count), kl_se the
// sample standard deviation (n-1 denominator) of the sequence means over
// sqrt(sequences), and sequences and tokens the counts. It returns ErrEmpty
// for no sequences or a sequence with no positions, ErrTooFew for one
// sequence, and TokenKL's errors with the sequence and position.
func KL(seqs []Sequence) (record.KL, error) {
	n := len(seqs)
	if n == 0 {
		return record.KL{}, fmt.Errorf("%w: no sequences", ErrEmpty)
	}
	if n < 2 {
		return record.KL{}, fmt.Errorf("%w: 1 sequence", ErrTooFew)
	}
	means := make([]float64, n)
	total, tokens := 0.0, 0
	for i, seq := range seqs {
		if len(seq) == 0 {
			return record.KL{}, fmt.Errorf("%w: sequence %d has no positions", ErrEmpty, i)
		}
		s := 0.0
		for j, pos := range seq {
			kl, err := TokenKL(pos.BF16, pos.Candidate)
			if err != nil {
				return record.KL{}, fmt.Errorf("sequence %d position %d: %w", i, j, err)
			}
			s += kl
		}
		total += s
		tokens += len(seq)
		means[i] = s / float64(len(seq))
	}
	fn := float64(n)
	sum := 0.0
	for _, m := range means {
		sum += m
	}
	mean := sum / fn
	ss := 0.0
	for _, m := range means {
		e := m - mean
		ss += float64(e * e)
	}
	slices.Sort(means)
	median := means[n/2]
	if n%2 == 0 {
		median = (means[n/2-1] + means[n/2]) / 2
	}
	return record.KL{
		KL:         mean,
		KLMedian:   median,
		KLPerToken: total / float64(tokens),
		KLSE:       math.Sqrt(ss/(fn-1)) / math.Sqrt(fn),
		Sequences:  n,
		Tokens:     tokens,
	}, nil
}

// Percentile is the p-th percentile of xs by linear interpolation between
// closest ranks (numpy's default); 0 for no values. xs is not reordered.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo, hi := int(math.Floor(pos)), int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}
