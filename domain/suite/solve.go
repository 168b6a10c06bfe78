package suite

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Solution is what a model that knows the answer replies to a generated
// item, and replies that are wrong in the ways models are wrong. The
// simulated engine answers from it; tests check that Right scores 1 and
// every Wrong scores 0 under the item's grader.
type Solution struct {
	// Domain is the item's domain, from its template.
	Domain string
	Right  string
	// Unformatted is the right answer outside the format contract (the
	// bare letter of a multiple-choice item), "" when the grader has no
	// format.
	Unformatted string
	Wrong       []string
}

var (
	reArith   = regexp.MustCompile(`Compute (\d+) \+ (\d+) \* (\d+) - (\d+)\.`)
	rePencils = regexp.MustCompile(`has (\d+) boxes of (\d+) pencils each\. It sells (\d+) pencils`)
	reTrain   = regexp.MustCompile(`travels at (\d+) km per hour for (\d+) hours, then (\d+) km more`)
	reVault   = regexp.MustCompile(`The access code for the vault of (\w+) is (\d+)\.`)
	reVaultQ  = regexp.MustCompile(`Question: what is the access code for the vault of (\w+)\?`)
	reOption  = regexp.MustCompile(`(?m)^([A-J])\) (.+)$`)
	reCapital = regexp.MustCompile(`the capital of (\w+) is (\w+)\.`)
	reCapQ    = regexp.MustCompile(`what is the capital of (\w+)\?`)
	reEnzyme  = regexp.MustCompile(`the enzyme (\w+) activates (\w+)\. (\w+) inhibits (\w+)\.`)
)

// Solve answers a prompt of one of Generate's templates; ok is false for
// any other prompt.
func Solve(prompt string) (Solution, bool) {
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	num := func(domain string, v int) (Solution, bool) {
		return Solution{Domain: domain, Right: strconv.Itoa(v), Wrong: []string{strconv.Itoa(v + 1), strconv.Itoa(v - 1), strconv.Itoa(v + 10)}}, true
	}
	if m := reArith.FindStringSubmatch(prompt); m != nil {
		return num("math", atoi(m[1])+atoi(m[2])*atoi(m[3])-atoi(m[4]))
	}
	if m := rePencils.FindStringSubmatch(prompt); m != nil {
		return num("math", atoi(m[1])*atoi(m[2])-atoi(m[3]))
	}
	if m := reTrain.FindStringSubmatch(prompt); m != nil {
		return num("math", atoi(m[1])*atoi(m[2])+atoi(m[3]))
	}
	if q := reVaultQ.FindStringSubmatch(prompt); q != nil {
		for _, m := range reVault.FindAllStringSubmatch(prompt, -1) {
			if m[1] == q[1] {
				return num("long_context", atoi(m[2]))
			}
		}
	}
	if strings.HasSuffix(prompt, codeFormat) {
		for _, t := range CodeTasks {
			for k := 2; k < 98; k++ {
				if prompt == t.Prompt(k)+codeFormat {
					return Solution{Domain: "code", Right: fence(t.Solution(k)), Wrong: []string{fence(t.Bug(k)), "I cannot write that function."}}, true
				}
			}
		}
	}
	if strings.HasSuffix(prompt, choiceFormat) {
		return solveChoice(prompt)
	}
	return Solution{}, false
}

func fence(code string) string { return "```python\n" + code + "```" }

func solveChoice(prompt string) (Solution, bool) {
	opts := reOption.FindAllStringSubmatch(prompt, -1)
	if len(opts) < 2 {
		return Solution{}, false
	}
	right, domain := "", "commonsense"
	switch {
	case reCapQ.MatchString(prompt):
		domain = "knowledge"
		q := reCapQ.FindStringSubmatch(prompt)
		for _, m := range reCapital.FindAllStringSubmatch(prompt, -1) {
			if m[1] == q[1] {
				right = m[2]
			}
		}
	case reEnzyme.MatchString(prompt):
		domain = "expert"
		m := reEnzyme.FindStringSubmatch(prompt)
		if m[2] == m[3] {
			right = m[4]
		}
	default:
		for _, e := range everyday {
			pre := strings.SplitN(e.q, "%s", 2)[1]
			if strings.Contains(prompt, pre) {
				right = e.right
			}
		}
	}
	if right == "" {
		return Solution{}, false
	}
	s := Solution{Domain: domain}
	for _, o := range opts {
		if o[2] == right {
			s.Right = fmt.Sprintf("From the facts given, the answer is %s.\nAnswer: %s", o[2], o[1])
			s.Unformatted = o[1]
		} else {
			s.Wrong = append(s.Wrong, fmt.Sprintf("I think it is %s.\nAnswer: %s", o[2], o[1]))
		}
	}
	if s.Right == "" {
		return Solution{}, false
	}
	return s, true
}
