package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// roundPod is a pod a live runner serves for SLA jobs, as the pods
// registry has it now.
type roundPod struct {
	Pod     string
	Runners int
	// HeldBy is the round a runner of the pod last saw holding it ("" for
	// none); the lease in the rounds bucket decides, this only informs.
	HeldBy string
}

// String describes the pod for a refusal's sentence.
func (p roundPod) String() string {
	s := fmt.Sprintf("%s (%d runner", p.Pod, p.Runners)
	if p.Runners != 1 {
		s += "s"
	}
	if p.HeldBy != "" {
		s += ", held by " + p.HeldBy
	}
	return s + ")"
}

// roundPods reads the pods registry: the pods at least one live runner
// serves for SLA jobs, by name. An entry lapses a TTL after its runner's
// last write (bus.BucketPods), so every entry read is a live runner's.
func (s *Service) roundPods(ctx context.Context) ([]roundPod, error) {
	lister, err := s.pods.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("round: list the pods registry: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	byPod := map[string]*roundPod{}
	for key := range lister.Keys() {
		e, err := s.pods.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // lapsed or deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("round: read %s in the pods registry: %w", key, err)
		}
		var entry events.PodEntry
		if err := json.Unmarshal(e.Value(), &entry); err != nil || entry.Pod == "" || !entry.Serves(events.JobSLA) {
			continue // not a runner that can run a round's jobs
		}
		p := byPod[entry.Pod]
		if p == nil {
			p = &roundPod{Pod: entry.Pod}
			byPod[entry.Pod] = p
		}
		p.Runners++
		if entry.HeldBy != "" {
			p.HeldBy = entry.HeldBy
		}
	}
	out := make([]roundPod, 0, len(byPod))
	for _, p := range byPod {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

// choosePod returns the pod a round runs on: named, when a live runner
// serves it for SLA jobs; with none named, the one pod live runners serve,
// when there is exactly one.
//
// Why no default pod: a round's jobs are pinned to its pod, so a round on
// a pod no runner serves waits out EntryTimeout for every entry (a default
// like "pod-0" names no pod on a cluster, where runners name their pod
// after their node). With one pod, naming it adds nothing, so it is
// chosen; with several, which one a round holds is the operator's choice.
//
// Refusals: round_pod_not_served (404 for a named pod, 503 when no pod
// can take a round) and round_pod_required (400), each sentence listing
// the pods that can take a round.
func (s *Service) choosePod(ctx context.Context, named string) (string, error) {
	if named != "" && !events.ValidID(named) {
		return "", ctl.Refuse(ctl.CodeBadRequest, "pod %q is not a valid name", named)
	}
	pods, err := s.roundPods(ctx)
	if err != nil {
		return "", err
	}
	list := make([]string, len(pods))
	for i, p := range pods {
		list[i] = p.String()
	}
	can := "the pods that can take a round (a live runner serves " + events.JobSLA + " jobs; see `arena pods`): " + strings.Join(list, ", ")
	switch {
	case len(pods) == 0 && named != "":
		return "", ctl.RefuseWith(ctl.CodeNotFound, reason.RoundPodNotServed,
			"no live runner serves pod %s, and no pod can take a round now: start a runner (--pod %s) first", named, named)
	case len(pods) == 0:
		return "", ctl.RefuseWith(ctl.CodeUnavailable, reason.RoundPodNotServed,
			"no pod can take a round: no live runner serves %s jobs (start a runner, then see `arena pods`)", events.JobSLA)
	case named != "":
		for _, p := range pods {
			if p.Pod == named {
				return named, nil
			}
		}
		return "", ctl.RefuseWith(ctl.CodeNotFound, reason.RoundPodNotServed, "no live runner serves pod %s; %s", named, can)
	case len(pods) == 1:
		return pods[0].Pod, nil
	default:
		return "", ctl.RefuseWith(ctl.CodeBadRequest, reason.RoundPodRequired, "name the round's pod (--pod): %s", can)
	}
}
