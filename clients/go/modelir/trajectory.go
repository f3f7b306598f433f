package modelir

// The trajectory of a multi-turn rollout, as an RL trainer consumes it: the whole token sequence, the loss mask, the
// sampled tokens' logprobs aligned to it and each turn's boundaries, by the rule in the comment of
// Response.prompt_token_ids (proto/modelir/v1/response.proto, normative; the Python, TypeScript and Rust SDKs
// implement the same rule, and conformance/trajectories holds the vector they all agree on).

import (
	"fmt"
	"math"
	"slices"

	v1 "modelir.dev/go/modelir/v1"
)

// TurnBoundary is where one turn sits in the sequence: its new prompt tokens are [PromptStart, SampledStart), its
// sampled tokens [SampledStart, End).
type TurnBoundary struct {
	PromptStart, SampledStart, End int
}

// Trajectory is a rollout's tokens, one entry per position: LossMask is true where the model sampled the token,
// Logprobs the sampled token's logprob (NaN where the token was not sampled or its logprob was not reported).
type Trajectory struct {
	Tokens   []int32
	LossMask []bool
	Logprobs []float32
	Turns    []TurnBoundary
}

// TrajectoryError is a rollout that has no trajectory by the rule: Turn (from 0) broke it, Reason says how.
type TrajectoryError struct {
	Turn   int
	Reason string
}

func (e *TrajectoryError) Error() string { return fmt.Sprintf("turn %d: %s", e.Turn, e.Reason) }

// TrajectoryDriftError is a turn whose prompt does not extend the earlier turns: at Position the sequence has
// Expected and the prompt has Found (-1 where the prompt ended first).
type TrajectoryDriftError struct {
	Turn, Position  int
	Expected, Found int32
}

func (e *TrajectoryDriftError) Error() string {
	seen := fmt.Sprintf("has %d", e.Found)
	if e.Found < 0 {
		seen = "ends there"
	}
	return fmt.Sprintf("turn %d: its prompt does not extend the earlier turns (re-tokenization drift): at position %d "+
		"the sequence has token %d, the prompt %s", e.Turn, e.Position, e.Expected, seen)
}

// NewTrajectory is the trajectory of a rollout given as its responses, in the order they were made. The error is a
// *TrajectoryError, or a *TrajectoryDriftError for a prompt that does not extend the earlier turns.
func NewTrajectory(responses []*v1.Response) (*Trajectory, error) {
	room := 0
	for i, response := range responses {
		if err := checkTurn(i, response); err != nil {
			return nil, err
		}
		room = max(room, len(response.GetPromptTokenIds())+len(response.GetChoices()[0].GetSampledTokens().GetTokenIds()))
	}
	// A rollout whose prompts extend each other ends where its longest turn ends: allocate that once, keep [0, end).
	t := &Trajectory{
		Tokens:   make([]int32, room),
		LossMask: make([]bool, room),
		Logprobs: make([]float32, room),
		Turns:    make([]TurnBoundary, 0, len(responses)),
	}
	for at := range t.Logprobs {
		t.Logprobs[at] = float32(math.NaN())
	}
	end := 0
	for i, response := range responses {
		prompt := response.GetPromptTokenIds()
		choice := response.GetChoices()[0]
		sampled := choice.GetSampledTokens().GetTokenIds()
		shared := min(end, len(prompt))
		for at := range shared {
			if prompt[at] != t.Tokens[at] {
				return nil, &TrajectoryDriftError{Turn: i, Position: at, Expected: t.Tokens[at], Found: prompt[at]}
			}
		}
		if len(prompt) < end {
			return nil, &TrajectoryDriftError{Turn: i, Position: len(prompt), Expected: t.Tokens[len(prompt)], Found: -1}
		}
		scored, err := scoredLogprobs(i, choice, sampled)
		if err != nil {
			return nil, err
		}
		sampledStart := len(prompt)
		copy(t.Tokens[end:], prompt[end:])
		copy(t.Tokens[sampledStart:], sampled)
		for at := range sampled {
			t.LossMask[sampledStart+at] = true
		}
		copy(t.Logprobs[sampledStart:], scored)
		t.Turns = append(t.Turns, TurnBoundary{end, sampledStart, sampledStart + len(sampled)})
		end = sampledStart + len(sampled)
	}
	t.Tokens, t.LossMask, t.Logprobs = t.Tokens[:end], t.LossMask[:end], t.Logprobs[:end]
	return t, nil
}

// TrajectoryFromRecords is the trajectory of a rollout given as its record file (either format, read with
// OpenRecords): every record, in order, is one turn; a record without a response is refused.
func TrajectoryFromRecords(path string) (*Trajectory, error) {
	records, err := OpenRecords(path)
	if err != nil {
		return nil, err
	}
	defer records.Close()
	var responses []*v1.Response
	for record, err := range records.All() {
		if err != nil {
			return nil, err
		}
		if record.GetResponse() == nil {
			kind := "a call that returned no response"
			if record.GetEmbedRequest() != nil {
				kind = "an Embed call"
			}
			reason := fmt.Sprintf("record '%s' is of %s: a rollout's turns all have responses", record.GetKey(), kind)
			return nil, &TrajectoryError{Turn: len(responses), Reason: reason}
		}
		responses = append(responses, record.GetResponse())
	}
	return NewTrajectory(responses)
}

func checkTurn(i int, response *v1.Response) error {
	switch {
	case len(response.GetChoices()) == 0:
		return &TrajectoryError{i, "the response has no choice to continue"}
	case len(response.GetPromptTokenIds()) == 0:
		return &TrajectoryError{i, "the response does not say which prompt token ids the engine saw (prompt_token_ids)"}
	case len(response.GetChoices()[0].GetSampledTokens().GetTokenIds()) == 0:
		return &TrajectoryError{i, "its first choice has no sampled token ids (sampled_tokens)"}
	}
	return nil
}

func scoredLogprobs(i int, choice *v1.Choice, sampled []int32) ([]float32, error) {
	scored := choice.GetLogprobs().GetTokenLogprobs()
	if len(scored) > len(sampled) {
		return nil, &TrajectoryError{i, fmt.Sprintf("it has %d logprobs for %d sampled tokens", len(scored), len(sampled))}
	}
	ids := choice.GetLogprobs().GetTokenIds()
	if len(ids) > 0 && (len(ids) > len(sampled) || !slices.Equal(ids, sampled[:len(ids)])) {
		return nil, &TrajectoryError{i, "its logprobs' token ids are not the first of its sampled token ids"}
	}
	return scored, nil
}
