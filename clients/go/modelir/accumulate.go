package modelir

import (
	"fmt"
	"iter"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	v1 "modelir.dev/go/modelir/v1"
)

// noPart is the part index of a token of no part (a finish's unattributed tokens, a delta's with part_index -1).
const noPart = -1

// Accumulator folds StreamGenerate events into the Response the same request gives unary, by the accumulation
// rules in the comment of StreamEvent (stream.proto), which are normative; each rule is quoted where it is applied.
// Text fragments are buffered in builders and joined once, in Response, so long streams stay linear.
type Accumulator struct {
	response v1.Response
	choices  map[int32]*choiceBuffer
	// Ended is true once the end event arrived.
	Ended bool
}

// partBuffer is one part being folded: the appended kinds keep their fragments in builders.
type partBuffer struct {
	part                           *v1.Part
	text, refusal, reasoning, args strings.Builder
	summaries                      []*strings.Builder
}

type choiceBuffer struct {
	parts       []*partBuffer
	logprobs    []*v1.TokenLogprobs
	tokenIDs    []int32
	partIndexes []int32
	finish      *v1.ChoiceFinish
	phase       v1.MessagePhase
}

// StreamOrderError is a stream that breaks the accumulation rules (a delta that skips a part).
type StreamOrderError struct{ Choice, PartIndex, Parts int32 }

func (e *StreamOrderError) Error() string {
	return fmt.Sprintf("stream delta skips to part %d of %d (choice %d)", e.PartIndex, e.Parts, e.Choice)
}

func (a *Accumulator) choice(index int32) *choiceBuffer {
	if a.choices == nil {
		a.choices = map[int32]*choiceBuffer{}
	}
	if a.choices[index] == nil {
		a.choices[index] = &choiceBuffer{}
	}
	return a.choices[index]
}

// Add folds one event in.
func (a *Accumulator) Add(event *v1.StreamEvent) error {
	switch e := event.GetEvent().(type) {
	case *v1.StreamEvent_Start:
		// "`start` sets the response's id and model, and its warnings"
		a.response.Id, a.response.Model = e.Start.GetId(), e.Start.GetModel()
		a.response.Warnings = append(a.response.Warnings, e.Start.GetWarnings()...)
	case *v1.StreamEvent_Delta:
		return a.addDelta(e.Delta)
	case *v1.StreamEvent_End:
		a.addEnd(e.End)
	}
	// "`part_done` changes nothing in the response"
	return nil
}

func (a *Accumulator) addEnd(end *v1.StreamEnd) {
	r := &a.response
	a.Ended = true
	// "a non-empty `id` or `model` on `end` replaces them"
	if end.GetId() != "" {
		r.Id = end.GetId()
	}
	if end.GetModel() != "" {
		r.Model = end.GetModel()
	}
	for _, finish := range end.GetFinishes() {
		a.choice(finish.GetChoiceIndex()).finish = finish
	}
	// "its values are set on the response (its warnings are appended after the start's)"
	r.Usage, r.Timing, r.Raw, r.PromptFeedback = end.Usage, end.Timing, end.Raw, end.PromptFeedback
	r.InputScores = slices.Clone(end.GetInputScores())
	r.PromptTokenIds = slices.Clone(end.GetPromptTokenIds())
	r.Errors = slices.Clone(end.GetErrors())
	r.ServiceTier = end.GetServiceTier()
	r.Warnings = append(r.Warnings, end.GetWarnings()...)
}

func (a *Accumulator) addDelta(delta *v1.PartDelta) error {
	choice := a.choice(delta.GetChoiceIndex())
	// "The phase of the choice's message, on any delta once it is known; a later delta's phase replaces an earlier
	// one. Unspecified on deltas that do not say." (IR 1.1)
	if delta.GetPhase() != v1.MessagePhase_MESSAGE_PHASE_UNSPECIFIED {
		choice.phase = delta.GetPhase()
	}
	if delta.Logprobs != nil {
		choice.logprobs = append(choice.logprobs, delta.Logprobs)
	}
	// "A delta with no content, artifacts, citations or item id only carries logprobs or token ids and starts no
	// part; its `part_index` may then be -1 (token ids of no part)."
	if delta.GetContent() == nil && len(delta.GetArtifacts()) == 0 && len(delta.GetCitations()) == 0 && delta.GetItemId() == "" {
		choice.addTokens(delta.GetTokenIds(), max(delta.GetPartIndex(), noPart))
		return nil
	}
	index := delta.GetPartIndex()
	if int(index) == len(choice.parts) {
		choice.parts = append(choice.parts, &partBuffer{part: &v1.Part{}})
	} else if int(index) > len(choice.parts) || index < 0 {
		return &StreamOrderError{Choice: delta.GetChoiceIndex(), PartIndex: index, Parts: int32(len(choice.parts))}
	}
	buffer := choice.parts[index]
	part := buffer.part
	switch content := delta.GetContent().(type) {
	case *v1.PartDelta_Text:
		if _, ok := part.Content.(*v1.Part_Text); !ok {
			buffer.replace(&v1.Part{Content: &v1.Part_Text{}})
		}
		buffer.text.WriteString(content.Text)
	case *v1.PartDelta_Refusal:
		if _, ok := part.Content.(*v1.Part_Refusal); !ok {
			buffer.replace(&v1.Part{Content: &v1.Part_Refusal{}})
		}
		buffer.refusal.WriteString(content.Refusal)
	case *v1.PartDelta_Reasoning:
		if part.GetReasoning() == nil {
			buffer.replace(&v1.Part{Content: &v1.Part_Reasoning{Reasoning: &v1.Reasoning{}}})
		}
		buffer.reasoning.WriteString(content.Reasoning.GetText())
		if content.Reasoning.SummaryText != nil {
			for len(buffer.summaries) <= int(content.Reasoning.GetSummaryIndex()) {
				buffer.summaries = append(buffer.summaries, &strings.Builder{})
			}
			buffer.summaries[content.Reasoning.GetSummaryIndex()].WriteString(content.Reasoning.GetSummaryText())
		}
	case *v1.PartDelta_ToolCall:
		if part.GetToolCall() == nil {
			buffer.replace(&v1.Part{Content: &v1.Part_ToolCall{ToolCall: &v1.ToolCall{}}})
		}
		call := part.GetToolCall()
		if content.ToolCall.GetId() != "" {
			call.Id = content.ToolCall.GetId()
		}
		if content.ToolCall.GetName() != "" {
			call.Name = content.ToolCall.GetName()
		}
		buffer.args.WriteString(content.ToolCall.GetArgumentsJson())
	case *v1.PartDelta_Blob:
		buffer.replace(&v1.Part{Content: &v1.Part_Blob{Blob: content.Blob}})
	case *v1.PartDelta_Part:
		// "a whole `part` replaces the part's content (and a whole part's artifacts, item id and citations are
		// appended to the part's)"; cloned, since later deltas may extend it. As Python's fold, a whole part without
		// content keeps the part's, and its provider options and cache breakpoint travel too.
		whole := proto.Clone(content.Part).(*v1.Part)
		if whole.Content != nil {
			buffer.replace(whole)
		}
		part.Artifacts = append(part.Artifacts, whole.Artifacts...)
		if whole.ItemId != "" {
			part.ItemId = whole.ItemId
		}
		part.Citations = append(part.Citations, whole.Citations...)
		part.ProviderOptions = append(part.ProviderOptions, whole.ProviderOptions...)
		if whole.CacheBreakpoint != nil {
			part.CacheBreakpoint = whole.CacheBreakpoint
		}
	}
	part.Artifacts = append(part.Artifacts, delta.GetArtifacts()...)
	part.Citations = append(part.Citations, delta.GetCitations()...)
	if delta.GetItemId() != "" {
		part.ItemId = delta.GetItemId()
	}
	choice.addTokens(delta.GetTokenIds(), index)
	return nil
}

// "A delta's `token_ids` are appended to the choice's `sampled_tokens.token_ids`, each with the delta's
// `part_index` as its part index"
func (c *choiceBuffer) addTokens(ids []int32, partIndex int32) {
	c.tokenIDs = append(c.tokenIDs, ids...)
	for range ids {
		c.partIndexes = append(c.partIndexes, partIndex)
	}
}

// replace gives the part the content of `from` and moves the appended kinds' text into the builders, so that
// later fragments extend the new content.
func (b *partBuffer) replace(from *v1.Part) {
	b.part.Content = from.Content
	b.text.Reset()
	b.refusal.Reset()
	b.reasoning.Reset()
	b.args.Reset()
	b.summaries = nil
	b.text.WriteString(from.GetText())
	b.refusal.WriteString(from.GetRefusal())
	b.reasoning.WriteString(from.GetReasoning().GetText())
	for _, s := range from.GetReasoning().GetSummary() {
		summary := &strings.Builder{}
		summary.WriteString(s)
		b.summaries = append(b.summaries, summary)
	}
	b.args.WriteString(from.GetToolCall().GetArgumentsJson())
}

// built is the part with its builders' text written in.
func (b *partBuffer) built() *v1.Part {
	part := proto.Clone(b.part).(*v1.Part)
	switch content := part.Content.(type) {
	case *v1.Part_Text:
		content.Text = b.text.String()
	case *v1.Part_Refusal:
		content.Refusal = b.refusal.String()
	case *v1.Part_Reasoning:
		content.Reasoning.Text = b.reasoning.String()
		content.Reasoning.Summary = nil
		for _, s := range b.summaries {
			content.Reasoning.Summary = append(content.Reasoning.Summary, s.String())
		}
	case *v1.Part_ToolCall:
		content.ToolCall.ArgumentsJson = b.args.String()
	}
	return part
}

// Response is the accumulated response; before the end event it holds the partial output.
func (a *Accumulator) Response() *v1.Response {
	out := proto.Clone(&a.response).(*v1.Response)
	indexes := make([]int32, 0, len(a.choices))
	for index := range a.choices {
		indexes = append(indexes, index)
	}
	slices.Sort(indexes)
	for _, index := range indexes {
		buffer := a.choices[index]
		// "Every accumulated message has the role `ROLE_ASSISTANT`; choices are sorted by index, and a choice named
		// only by a `ChoiceFinish` still appears."
		choice := &v1.Choice{Index: index, Message: &v1.Message{Role: v1.Role_ROLE_ASSISTANT, Phase: buffer.phase}}
		for _, pb := range buffer.parts {
			choice.Message.Parts = append(choice.Message.Parts, pb.built())
		}
		if len(buffer.logprobs) > 0 {
			choice.Logprobs = ConcatLogprobs(buffer.logprobs)
		}
		tokenIDs, partIndexes := slices.Clone(buffer.tokenIDs), slices.Clone(buffer.partIndexes)
		if f := buffer.finish; f != nil {
			choice.FinishReason, choice.RawFinishReason = f.GetFinishReason(), f.GetRawFinishReason()
			switch stop := f.GetStop().(type) {
			case *v1.ChoiceFinish_StopSequence:
				choice.Stop = &v1.Choice_StopSequence{StopSequence: stop.StopSequence}
			case *v1.ChoiceFinish_StopTokenId:
				choice.Stop = &v1.Choice_StopTokenId{StopTokenId: stop.StopTokenId}
			}
			choice.OutputTokenCount, choice.ConstrainedLabel = f.OutputTokenCount, f.GetConstrainedLabel()
			choice.NativeJson = f.GetNativeJson() // (IR 1.1)
			// "a finish's `unattributed_token_ids` are appended last, with -1"
			for _, id := range f.GetUnattributedTokenIds() {
				tokenIDs, partIndexes = append(tokenIDs, id), append(partIndexes, noPart)
			}
		}
		if len(tokenIDs) > 0 {
			// "When no token has a part index of 0 or more, `sampled_tokens.part_indexes` stays empty"
			if !slices.ContainsFunc(partIndexes, func(i int32) bool { return i >= 0 }) {
				partIndexes = nil
			}
			choice.SampledTokens = &v1.SampledTokens{TokenIds: tokenIDs, PartIndexes: partIndexes}
		}
		out.Choices = append(out.Choices, choice)
	}
	return out
}

// ConcatLogprobs joins consecutive logprob chunks (stream deltas) into one: columns concatenated in arrival order,
// byte offsets rebased by the bytes that came before, the basis of the first chunk that has one.
func ConcatLogprobs(chunks []*v1.TokenLogprobs) *v1.TokenLogprobs {
	out := &v1.TokenLogprobs{}
	for _, c := range chunks {
		if out.Basis == v1.LogprobBasis_LOGPROB_BASIS_UNSPECIFIED {
			out.Basis = c.GetBasis()
		}
		base, topBase := uint32(len(out.TokenBytes)), uint32(len(out.TopTokenBytes))
		out.TokenIds = append(out.TokenIds, c.GetTokenIds()...)
		out.TokenLogprobs = append(out.TokenLogprobs, c.GetTokenLogprobs()...)
		out.Tokens = append(out.Tokens, c.GetTokens()...)
		for _, o := range c.GetTokenByteOffsets() {
			out.TokenByteOffsets = append(out.TokenByteOffsets, o+base)
		}
		out.TokenBytes = append(out.TokenBytes, c.GetTokenBytes()...)
		out.TopCounts = append(out.TopCounts, c.GetTopCounts()...)
		out.TopTokenIds = append(out.TopTokenIds, c.GetTopTokenIds()...)
		out.TopLogprobs = append(out.TopLogprobs, c.GetTopLogprobs()...)
		out.TopTokens = append(out.TopTokens, c.GetTopTokens()...)
		for _, o := range c.GetTopTokenByteOffsets() {
			out.TopTokenByteOffsets = append(out.TopTokenByteOffsets, o+topBase)
		}
		out.TopTokenBytes = append(out.TopTokenBytes, c.GetTopTokenBytes()...)
	}
	return out
}

// Accumulate folds a whole stream; it stops at the stream's first error.
func Accumulate(events iter.Seq2[*v1.StreamEvent, error]) (*v1.Response, error) {
	var a Accumulator
	for event, err := range events {
		if err != nil {
			return a.Response(), err
		}
		if err := a.Add(event); err != nil {
			return a.Response(), err
		}
	}
	return a.Response(), nil
}
