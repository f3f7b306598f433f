package modelir

import (
	"strings"

	v1 "modelir.dev/go/modelir/v1"
)

// Text is every text part of the choice, joined in order.
func Text(choice *v1.Choice) string {
	var b strings.Builder
	for _, part := range choice.GetMessage().GetParts() {
		if t, ok := part.GetContent().(*v1.Part_Text); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// Refusal is every refusal part of the choice, joined in order (empty when the model did not refuse).
func Refusal(choice *v1.Choice) string {
	var b strings.Builder
	for _, part := range choice.GetMessage().GetParts() {
		b.WriteString(part.GetRefusal())
	}
	return b.String()
}

// SampledTokens are the choice's sampled token ids (whether or not logprobs were asked for) and, one per token,
// the index of the message part each belongs to (-1 for none; empty when the provider cannot attribute tokens).
func SampledTokens(choice *v1.Choice) (tokenIDs, partIndexes []int32) {
	return choice.GetSampledTokens().GetTokenIds(), choice.GetSampledTokens().GetPartIndexes()
}

// ToolCalls are the choice's tool calls, in the order the model made them.
func ToolCalls(choice *v1.Choice) []*v1.ToolCall {
	var calls []*v1.ToolCall
	for _, part := range choice.GetMessage().GetParts() {
		if call := part.GetToolCall(); call != nil {
			calls = append(calls, call)
		}
	}
	return calls
}

// Reasoning is the visible reasoning text of every reasoning part, joined in order.
func Reasoning(choice *v1.Choice) string {
	var b strings.Builder
	for _, part := range choice.GetMessage().GetParts() {
		b.WriteString(part.GetReasoning().GetText())
	}
	return b.String()
}

// Logprobs are a choice's sampled-token logprobs as typed columns ([]int32, []float32: the generated fields
// themselves, not copies), plus each token's bytes sliced out of the packed buffer.
type Logprobs struct {
	TokenIDs    []int32
	Logprobs    []float32
	Tokens      []string
	TokenBytes  [][]byte
	TopCounts   []uint32
	TopTokenIDs []int32
	TopLogprobs []float32
	TopTokens   []string
}

// Columns views a TokenLogprobs as Logprobs.
func Columns(lp *v1.TokenLogprobs) Logprobs {
	return Logprobs{
		TokenIDs: lp.GetTokenIds(), Logprobs: lp.GetTokenLogprobs(), Tokens: lp.GetTokens(),
		TokenBytes: byteSlices(lp.GetTokenBytes(), lp.GetTokenByteOffsets()),
		TopCounts:  lp.GetTopCounts(), TopTokenIDs: lp.GetTopTokenIds(), TopLogprobs: lp.GetTopLogprobs(),
		TopTokens: lp.GetTopTokens(),
	}
}

func byteSlices(data []byte, offsets []uint32) [][]byte {
	out := make([][]byte, len(offsets))
	for i, start := range offsets {
		end := uint32(len(data))
		if i+1 < len(offsets) {
			end = offsets[i+1]
		}
		out[i] = data[start:end]
	}
	return out
}

// Completion wraps a response with accessors for its first choice.
type Completion struct{ *v1.Response }

func (c Completion) first() *v1.Choice {
	if choices := c.GetChoices(); len(choices) > 0 {
		return choices[0]
	}
	return nil
}

// Text of the first choice.
func (c Completion) Text() string { return Text(c.first()) }

// Refusal of the first choice.
func (c Completion) Refusal() string { return Refusal(c.first()) }

// SampledTokens of the first choice.
func (c Completion) SampledTokens() (tokenIDs, partIndexes []int32) { return SampledTokens(c.first()) }

// ToolCalls of the first choice.
func (c Completion) ToolCalls() []*v1.ToolCall { return ToolCalls(c.first()) }

// Reasoning of the first choice.
func (c Completion) Reasoning() string { return Reasoning(c.first()) }

// Logprobs of the first choice.
func (c Completion) Logprobs() Logprobs { return Columns(c.first().GetLogprobs()) }

// TextFromBytes is the first choice's sampled text rebuilt from its token bytes (never by joining token strings).
func (c Completion) TextFromBytes() string { return string(c.first().GetLogprobs().GetTokenBytes()) }
