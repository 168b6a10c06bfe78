package suite

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Sizes is how many items a generated suite holds per domain.
type Sizes map[string]int

// DevSizes are the shipped dev suite's sizes: every domain but expert is
// large enough to be valid (50 items); expert is the small diagnostic
// domain, as in the arena's records.
var DevSizes = Sizes{"code": 50, "commonsense": 60, "expert": 30, "knowledge": 60, "long_context": 50, "math": 60}

// Seeds of the shipped splits. They differ, so no ranked item is a dev
// item: the ranked split is never shown to participants.
const (
	SeedDev    uint64 = 0x6c6f7762646576   // "lowbdev"
	SeedRanked uint64 = 0x6c6f77627261616b // "lowbraak"
)

// Generate builds a suite deterministically from its seed: the same
// name, version, split, seed and sizes give the same items, byte for byte.
func Generate(name, version, split string, seed uint64, sizes Sizes) *Suite {
	s := &Suite{Meta: Meta{Name: name, Version: version, Split: split, Seed: seed}, Items: map[string][]Item{}}
	for _, d := range Domains {
		n := sizes[d]
		if n <= 0 {
			continue
		}
		s.Domains = append(s.Domains, d)
		r := rand.New(rand.NewPCG(seed, hash(d)))
		for i := range n {
			it := generators[d](r, split)
			it.ID = fmt.Sprintf("%s-%s-%04d", d, split, i)
			it.Domain = d
			s.Items[d] = append(s.Items[d], it)
		}
	}
	return s
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

var generators = map[string]func(*rand.Rand, string) Item{
	"math":         genMath,
	"long_context": genLongContext,
	"knowledge":    genKnowledge,
	"commonsense":  genCommonsense,
	"expert":       genExpert,
	"code":         genCode,
}

// --- math: arithmetic and word problems, numeric answers.

const numberOnly = " Reply with the number only."

func genMath(r *rand.Rand, _ string) Item {
	a, b, c, d := r.IntN(90)+10, r.IntN(40)+2, r.IntN(9)+2, r.IntN(50)+1
	switch r.IntN(3) {
	case 0:
		return Item{Prompt: fmt.Sprintf("Compute %d + %d * %d - %d.", a, b, c, d) + numberOnly,
			Answer: strconv.Itoa(a + b*c - d), Grader: GraderNumeric, MaxTokens: 16}
	case 1:
		total := b * c
		sold := r.IntN(total-1) + 1
		return Item{Prompt: fmt.Sprintf("A shop has %d boxes of %d pencils each. It sells %d pencils. How many pencils are left?", b, c, sold) + numberOnly,
			Answer: strconv.Itoa(total - sold), Grader: GraderNumeric, MaxTokens: 16}
	default:
		speed, hours := r.IntN(80)+20, r.IntN(7)+2
		return Item{Prompt: fmt.Sprintf("A train travels at %d km per hour for %d hours, then %d km more. How many km does it travel in all?", speed, hours, d) + numberOnly,
			Answer: strconv.Itoa(speed*hours + d), Grader: GraderNumeric, MaxTokens: 16}
	}
}

// --- long_context: a fact hidden at a depth of a long filler.

var fillerWords = strings.Fields("the committee reviewed the quarterly figures again and noted that the weather in the northern provinces had been mild while the harbour authority published its usual schedule of ferries and the library extended its opening hours")

// Depths at which long-context facts are hidden.
var Depths = []float64{0.1, 0.3, 0.5, 0.7, 0.9}

func genLongContext(r *rand.Rand, _ string) Item {
	words := 1200 + r.IntN(800)
	depth := Depths[r.IntN(len(Depths))]
	vault := name(r)
	code := 1000 + r.IntN(9000)
	var b strings.Builder
	at := int(float64(words) * depth)
	for i := range words {
		if i == at {
			fmt.Fprintf(&b, "The access code for the vault of %s is %d. ", vault, code)
		}
		b.WriteString(fillerWords[(i*7+r.IntN(3))%len(fillerWords)])
		if i%17 == 16 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return Item{Prompt: "Read the document and answer the question.\n\n" + b.String() +
		fmt.Sprintf("\n\nQuestion: what is the access code for the vault of %s?", vault) + numberOnly,
		Answer: strconv.Itoa(code), Grader: GraderNumeric, MaxTokens: 16}
}

// --- multiple choice over generated facts.

var syllables = strings.Fields("ka lo mi ren tas vo qui zel dar phi ul sen bor tia mak ne ost ya fen gri")

func name(r *rand.Rand) string {
	n := 2 + r.IntN(2)
	var b strings.Builder
	for range n {
		b.WriteString(syllables[r.IntN(len(syllables))])
	}
	s := b.String()
	return strings.ToUpper(s[:1]) + s[1:]
}

// names returns k distinct invented names.
func names(r *rand.Rand, k int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < k {
		n := name(r)
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// choiceFormat is the multiple-choice format contract, in every prompt.
const choiceFormat = "\nEnd your reply with a line \"Answer: X\", where X is the letter of your choice."

func choiceItem(r *rand.Rand, question string, right string, wrong []string) Item {
	opts := append([]string{right}, wrong...)
	r.Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })
	ans := ""
	var b strings.Builder
	b.WriteString(question)
	for i, o := range opts {
		if o == right {
			ans = Letter(i)
		}
		fmt.Fprintf(&b, "\n%s) %s", Letter(i), o)
	}
	b.WriteString(choiceFormat)
	return Item{Prompt: b.String(), Answer: ans, Grader: GraderChoice, Choices: opts, MaxTokens: 32}
}

func genKnowledge(r *rand.Rand, _ string) Item {
	k := 4
	if r.IntN(3) == 0 {
		k = 10 // some items have ten options, as knowledge suites do
	}
	ns := names(r, k+1)
	country, capital := ns[0], ns[1]
	facts := fmt.Sprintf("Facts: the capital of %s is %s. %s is known for its bridges.", country, capital, capital)
	return choiceItem(r, facts+fmt.Sprintf("\nQuestion: what is the capital of %s?", country), capital, ns[2:])
}

var everyday = []struct{ q, right string }{
	{"%s leaves an ice cube in the sun. What happens to it?", "it melts"},
	{"%s drops a glass on a stone floor. What most likely happens?", "it breaks"},
	{"%s forgets to water a plant for a month. What most likely happens?", "it wilts"},
	{"%s puts a wet towel on a hot radiator. What happens to the towel?", "it dries"},
	{"%s leaves milk out of the fridge for a week. What happens to it?", "it spoils"},
	{"%s lets go of a helium balloon outdoors. What does it do?", "it rises"},
}

var everydayWrong = []string{"it freezes", "it doubles in size", "it turns to gold", "it sings", "it becomes heavier", "it stays exactly the same forever"}

func genCommonsense(r *rand.Rand, _ string) Item {
	e := everyday[r.IntN(len(everyday))]
	wrong := make([]string, 0, 3)
	for _, i := range r.Perm(len(everydayWrong)) {
		if len(wrong) == 3 {
			break
		}
		wrong = append(wrong, everydayWrong[i])
	}
	return choiceItem(r, fmt.Sprintf("Question: "+e.q, name(r)), e.right, wrong)
}

func genExpert(r *rand.Rand, _ string) Item {
	ns := names(r, 6)
	a, b, c := ns[0], ns[1], ns[2]
	facts := fmt.Sprintf("Facts: the enzyme %s activates %s. %s inhibits %s. %s is unrelated to %s.", a, b, b, c, ns[3], c)
	q := fmt.Sprintf("\nQuestion: which molecule is inhibited, through one intermediate, when %s is active?", a)
	return choiceItem(r, facts+q, c, []string{b, ns[3], ns[4]})
}

// --- code: small Python tasks with tests.

// CodeTask is one template of the code domain; Solution is a correct
// program and Bug a plausible wrong one (the simulated engine's answers).
type CodeTask struct {
	Name     string
	Prompt   func(k int) string
	Solution func(k int) string
	Bug      func(k int) string
	Tests    func(k int) string
}

// CodeTasks are the code domain's templates, each taking a parameter k.
var CodeTasks = []CodeTask{
	{"scale", func(k int) string {
		return fmt.Sprintf("Write a Python function scale(xs) that returns a new list with every element of xs multiplied by %d.", k)
	},
		func(k int) string { return fmt.Sprintf("def scale(xs):\n    return [x * %d for x in xs]\n", k) },
		func(k int) string { return fmt.Sprintf("def scale(xs):\n    return [x + %d for x in xs]\n", k) },
		func(k int) string {
			return fmt.Sprintf("assert scale([1, 2, 3]) == [%d, %d, %d]\nassert scale([]) == []\n", k, 2*k, 3*k)
		}},
	{"count_above", func(k int) string {
		return fmt.Sprintf("Write a Python function count_above(xs) that returns how many elements of xs are greater than %d.", k)
	},
		func(k int) string {
			return fmt.Sprintf("def count_above(xs):\n    return sum(1 for x in xs if x > %d)\n", k)
		},
		func(k int) string {
			return fmt.Sprintf("def count_above(xs):\n    return sum(1 for x in xs if x >= %d)\n", k)
		},
		func(k int) string {
			return fmt.Sprintf("assert count_above([%d, %d, %d]) == 1\nassert count_above([]) == 0\n", k-1, k, k+1)
		}},
	{"sum_multiples", func(k int) string {
		return fmt.Sprintf("Write a Python function sum_multiples(n) that returns the sum of the multiples of %d from 1 to n inclusive.", k)
	},
		func(k int) string {
			return fmt.Sprintf("def sum_multiples(n):\n    return sum(i for i in range(1, n + 1) if i %% %d == 0)\n", k)
		},
		func(k int) string {
			return fmt.Sprintf("def sum_multiples(n):\n    return sum(i for i in range(1, n) if i %% %d == 0)\n", k)
		},
		func(k int) string {
			n := 4 * k
			return fmt.Sprintf("assert sum_multiples(%d) == %d\nassert sum_multiples(0) == 0\n", n, k*(1+2+3+4))
		}},
	{"repeat_word", func(k int) string {
		return fmt.Sprintf("Write a Python function repeat_word(w) that returns w repeated %d times, separated by single spaces.", k)
	},
		func(k int) string { return fmt.Sprintf("def repeat_word(w):\n    return ' '.join([w] * %d)\n", k) },
		func(k int) string { return fmt.Sprintf("def repeat_word(w):\n    return ' '.join([w] * %d)\n", k+1) },
		func(k int) string {
			return fmt.Sprintf("assert repeat_word('ab') == %q\n", strings.TrimSpace(strings.Repeat("ab ", k)))
		}},
}

const codeFormat = "\nReply with the function in a ```python code block."

// CodeK is the range of a code task's parameter per split: disjoint, so
// that no ranked code task is a dev one.
var CodeK = map[string][2]int{SplitDev: {2, 50}, SplitRanked: {50, 98}}

func genCode(r *rand.Rand, split string) Item {
	t := CodeTasks[r.IntN(len(CodeTasks))]
	kr := CodeK[split]
	if kr[1] == 0 {
		kr = CodeK[SplitDev]
	}
	k := kr[0] + r.IntN(kr[1]-kr[0])
	return Item{Prompt: t.Prompt(k) + codeFormat, Grader: GraderCode, Tests: t.Tests(k), MaxTokens: 128}
}

// LoadPrompt is one prompt of the efficiency workloads' load, about words
// words long: a document of the long-context domain's filler with a fact
// hidden in it, and its question. It is drawn from r, so a load generator
// seeded per run never repeats a prompt across runs, and it reads like
// the suite's own items, so the eval items mixed into the load (the
// accuracy-under-load audit) are not told apart by their form.
func LoadPrompt(r *rand.Rand, words int) string {
	words = max(words, 16)
	vault := name(r)
	code := 1000 + r.IntN(9000)
	at := r.IntN(words)
	var b strings.Builder
	b.WriteString("Read the document and answer the question.\n\n")
	for i := range words {
		if i == at {
			fmt.Fprintf(&b, "The access code for the vault of %s is %d. ", vault, code)
		}
		b.WriteString(fillerWords[(i*7+r.IntN(3))%len(fillerWords)])
		if i%17 == 16 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	fmt.Fprintf(&b, "\n\nQuestion: what is the access code for the vault of %s?%s", vault, numberOnly)
	return b.String()
}
