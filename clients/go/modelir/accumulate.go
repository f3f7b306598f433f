package modelir

import (
	"fmt"
	"iter"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	v1 "modelir.dev/go/modelir/v1"
)

// Accumulator folds StreamGenerate events into the Response the same request gives unary, by the rules of
// stream.proto: a delta whose part_index is one past the last starts a part; text, reasoning and tool-call
// arguments append; logprob chunks concatenate with byte offsets rebased; the basis comes from the first chunk;
// the role is assistant; the end event's id and model replace the start's.
type Accumulator struct {
	response v1.Response
	choices  map[int32]*choiceBuffer
	Ended    bool
}

type partBuffer struct {
	part                  *v1.Part
	text, reasoning, args strings.Builder
	summaries             []*strings.Builder
}

type choiceBuffer struct {
	parts    []*partBuffer
	logprobs []*v1.TokenLogprobs
	finish   *v1.ChoiceFinish
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
		a.response.Id, a.response.Model = e.Start.GetId(), e.Start.GetModel()
	case *v1.StreamEvent_Delta:
		return a.addDelta(e.Delta)
	case *v1.StreamEvent_End:
		end, r := e.End, &a.response
		a.Ended = true
		if end.GetId() != "" {
			r.Id = end.GetId()
		}
		if end.GetModel() != "" {
			r.Model = end.GetModel()
		}
		for _, finish := range end.GetFinishes() {
			a.choice(finish.GetChoiceIndex()).finish = finish
		}
		r.Usage, r.InputScores, r.Timing, r.Error, r.Raw = end.Usage, end.InputScores, end.Timing, end.Error, end.Raw
		r.PromptTokenIds = append(r.PromptTokenIds, end.GetPromptTokenIds()...)
		r.Warnings = append(r.Warnings, end.GetWarnings()...)
	}
	return nil
}

func (a *Accumulator) addDelta(delta *v1.PartDelta) error {
	choice := a.choice(delta.GetChoiceIndex())
	if delta.Logprobs != nil {
		choice.logprobs = append(choice.logprobs, delta.Logprobs)
	}
	if delta.GetContent() == nil && len(delta.GetArtifacts()) == 0 && delta.GetItemId() == "" {
		return nil
	}
	index := int(delta.GetPartIndex())
	if index == len(choice.parts) {
		choice.parts = append(choice.parts, &partBuffer{part: &v1.Part{}})
	} else if index > len(choice.parts) {
		return fmt.Errorf("stream delta skips to part %d of %d", index, len(choice.parts))
	}
	buffer := choice.parts[index]
	part := buffer.part
	switch content := delta.GetContent().(type) {
	case *v1.PartDelta_Text:
		buffer.text.WriteString(content.Text)
		if _, ok := part.Content.(*v1.Part_Text); !ok {
			part.Content = &v1.Part_Text{}
		}
	case *v1.PartDelta_Reasoning:
		if part.GetReasoning() == nil {
			part.Content = &v1.Part_Reasoning{Reasoning: &v1.Reasoning{}}
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
			part.Content = &v1.Part_ToolCall{ToolCall: &v1.ToolCall{}}
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
		part.Content = &v1.Part_Blob{Blob: content.Blob}
	}
	part.Artifacts = append(part.Artifacts, delta.GetArtifacts()...)
	if delta.GetItemId() != "" {
		part.ItemId = delta.GetItemId()
	}
	return nil
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
		choice := &v1.Choice{Index: index, Message: &v1.Message{Role: v1.Role_ROLE_ASSISTANT}}
		for _, pb := range buffer.parts {
			part := proto.Clone(pb.part).(*v1.Part)
			switch content := part.Content.(type) {
			case *v1.Part_Text:
				content.Text = pb.text.String()
			case *v1.Part_Reasoning:
				content.Reasoning.Text = pb.reasoning.String()
				for _, s := range pb.summaries {
					content.Reasoning.Summary = append(content.Reasoning.Summary, s.String())
				}
			case *v1.Part_ToolCall:
				content.ToolCall.ArgumentsJson = pb.args.String()
			}
			choice.Message.Parts = append(choice.Message.Parts, part)
		}
		if len(buffer.logprobs) > 0 {
			choice.Logprobs = ConcatLogprobs(buffer.logprobs)
		}
		if f := buffer.finish; f != nil {
			choice.FinishReason, choice.RawFinishReason, choice.StopSequence = f.GetFinishReason(), f.GetRawFinishReason(), f.GetStopSequence()
		}
		out.Choices = append(out.Choices, choice)
	}
	return out
}

// ConcatLogprobs joins consecutive logprob chunks (stream deltas) into one, shifting the byte offsets.
func ConcatLogprobs(chunks []*v1.TokenLogprobs) *v1.TokenLogprobs {
	out := &v1.TokenLogprobs{}
	for _, c := range chunks {
		if out.Basis == v1.LogprobBasis_LOGPROB_BASIS_UNSPECIFIED {
			out.Basis = c.GetBasis()
		}
		base, topBase := uint32(len(out.TokenBytes)), uint32(len(out.TopTokenBytes))
		out.TokenIds = append(out.TokenIds, c.GetTokenIds()...)
		out.Logprobs = append(out.Logprobs, c.GetLogprobs()...)
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
