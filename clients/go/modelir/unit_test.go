package modelir_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"modelir.dev/go/modelir"
	v1 "modelir.dev/go/modelir/v1"
)

func TestIRVersionComesFromTheDescriptor(t *testing.T) {
	if _, err := modelir.Major(modelir.IRVersion); err != nil {
		t.Fatalf("IRVersion %q: %v", modelir.IRVersion, err)
	}
}

func TestThisClientAcceptsAnyMinorOfItsMajor(t *testing.T) {
	if modelir.IRVersion != "1.1.0" {
		t.Fatalf("IRVersion %q, want 1.1.0", modelir.IRVersion)
	}
	for _, server := range []string{"1.0.0", "1.1.0", "1.4.2"} {
		if err := modelir.CheckCompatible(server, modelir.IRVersion); err != nil {
			t.Errorf("server %q: %v", server, err)
		}
	}
	for _, server := range []string{"2.0.0", "0.9.0"} {
		if modelir.CheckCompatible(server, modelir.IRVersion) == nil {
			t.Errorf("server %q accepted", server)
		}
	}
}

func TestAnotherMajorIsRefused(t *testing.T) {
	if err := modelir.CheckCompatible("1.9.0", "1.0.0"); err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"2.0.0", "0.9.0", ""} {
		var incompatible *modelir.IncompatibleServerError
		if err := modelir.CheckCompatible(server, "1.0.0"); !errors.As(err, &incompatible) {
			t.Fatalf("server %q: got %v", server, err)
		}
	}
}

func TestRichStatusDecodesIntoTypedErrors(t *testing.T) {
	st, _ := status.New(codes.FailedPrecondition, "no fim").WithDetails(
		&errdetails.ErrorInfo{Reason: "UNSUPPORTED_CAPABILITY", Domain: "modelir.dev"},
		&v1.UnsupportedCapabilities{Model: "m", Missing: []v1.Capability{v1.Capability_CAPABILITY_FIM}},
	)
	err := modelir.FromRPC(st.Err())
	var e *modelir.Error
	if !errors.As(err, &e) || !errors.Is(err, modelir.ErrUnsupportedCapability) || errors.Is(err, modelir.ErrUnknownModel) {
		t.Fatalf("got %#v", err)
	}
	if e.CodeName() != "FAILED_PRECONDITION" || e.Unsupported.GetMissing()[0] != v1.Capability_CAPABILITY_FIM {
		t.Fatalf("got %v", e)
	}
	bad, _ := status.New(codes.InvalidArgument, "bad").WithDetails(
		&errdetails.ErrorInfo{Reason: "INVALID_REQUEST", Domain: "modelir.dev"},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "x"}}},
	)
	if err := modelir.FromRPC(bad.Err()); !errors.Is(err, modelir.ErrInvalidRequest) || err.(*modelir.Error).BadRequest.GetFieldViolations()[0].GetField() != "x" {
		t.Fatalf("got %v", err)
	}
	if err := modelir.FromRPC(status.Error(codes.Unavailable, "down")); err.(*modelir.Error).Reason != "UNAVAILABLE" {
		t.Fatalf("got %v", err)
	}
	if modelir.FromRPC(nil) != nil {
		t.Fatal("nil must stay nil")
	}
}

func TestAccumulationRebasesOffsetsAndTheEndWins(t *testing.T) {
	delta := func(part int32, content any, lp *v1.TokenLogprobs) *v1.StreamEvent {
		d := &v1.PartDelta{PartIndex: part, Logprobs: lp}
		switch c := content.(type) {
		case string:
			d.Content = &v1.PartDelta_Text{Text: c}
		case *v1.ToolCallDelta:
			d.Content = &v1.PartDelta_ToolCall{ToolCall: c}
		}
		return &v1.StreamEvent{Event: &v1.StreamEvent_Delta{Delta: d}}
	}
	events := []*v1.StreamEvent{
		{Event: &v1.StreamEvent_Start{Start: &v1.StreamStart{Id: "a", Model: "m"}}},
		delta(0, "h", &v1.TokenLogprobs{TokenIds: []int32{104}, TokenLogprobs: []float32{-0.5}, TokenBytes: []byte("h"), TokenByteOffsets: []uint32{0}, Basis: v1.LogprobBasis_LOGPROB_BASIS_POST_SAMPLING}),
		delta(0, "é", &v1.TokenLogprobs{TokenIds: []int32{195, 169}, TokenLogprobs: []float32{-1, -2}, TokenBytes: []byte("é"), TokenByteOffsets: []uint32{0, 1}}),
		delta(1, &v1.ToolCallDelta{Id: "c", Name: "f", ArgumentsJson: `{"a":`}, nil),
		delta(1, &v1.ToolCallDelta{ArgumentsJson: `1}`}, nil),
		{Event: &v1.StreamEvent_End{End: &v1.StreamEnd{Id: "b", Finishes: []*v1.ChoiceFinish{{FinishReason: v1.FinishReason_FINISH_REASON_STOP}}}}},
	}
	var acc modelir.Accumulator
	for _, e := range events {
		if err := acc.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	r := modelir.Completion{Response: acc.Response()}
	lp := r.Logprobs()
	if r.GetId() != "b" || r.GetModel() != "m" || r.Text() != "hé" || r.TextFromBytes() != "hé" ||
		r.ToolCalls()[0].GetArgumentsJson() != `{"a":1}` || len(lp.TokenIDs) != 3 || string(lp.TokenBytes[2]) != "\xa9" ||
		r.GetChoices()[0].GetLogprobs().GetTokenByteOffsets()[2] != 2 ||
		r.GetChoices()[0].GetLogprobs().GetBasis() != v1.LogprobBasis_LOGPROB_BASIS_POST_SAMPLING ||
		r.GetChoices()[0].GetMessage().GetRole() != v1.Role_ROLE_ASSISTANT ||
		r.GetChoices()[0].GetFinishReason() != v1.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("accumulated %v", r.Response)
	}
}

// TestAccumulationVectors folds the hand-written streams of clients/testdata (the rules of stream.proto) and
// compares the result by the suite's rules.
func TestAccumulationVectors(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/stream_accumulation.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Cases []struct {
			Name     string            `json:"name"`
			Events   []json.RawMessage `json:"events"`
			Response json.RawMessage   `json:"response"`
			Error    string            `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	for _, c := range vectors.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var acc modelir.Accumulator
			var failed error
			for _, raw := range c.Events {
				var event v1.StreamEvent
				parse(t, raw, &event)
				if failed = acc.Add(&event); failed != nil {
					break
				}
			}
			var order *modelir.StreamOrderError
			if c.Error != "" {
				if !errors.As(failed, &order) || !strings.Contains(failed.Error(), c.Error) {
					t.Fatalf("expected an error with %q, got %v", c.Error, failed)
				}
				return
			}
			if failed != nil || !acc.Ended {
				t.Fatalf("failed %v, ended %v", failed, acc.Ended)
			}
			if problems := differences(decode(t, c.Response), toJSON(t, acc.Response()), "$", nil); len(problems) > 0 {
				t.Error(strings.Join(problems, "\n"))
			}
			first := modelir.Completion{Response: acc.Response()}
			ids, parts := first.SampledTokens()
			if (len(parts) > 0 && len(ids) != len(parts)) || (c.Name == "every_rule" && first.Refusal() != "I cannot.") {
				t.Fatalf("accessors: %v %v %q", ids, parts, first.Refusal())
			}
		})
	}
}

func TestAWholePartIsNeverAliased(t *testing.T) {
	whole := &v1.Part{Content: &v1.Part_Reasoning{Reasoning: &v1.Reasoning{Text: "a"}}}
	var acc modelir.Accumulator
	for _, d := range []*v1.PartDelta{
		{Content: &v1.PartDelta_Part{Part: whole}},
		{Content: &v1.PartDelta_Reasoning{Reasoning: &v1.ReasoningDelta{Text: "b"}}},
	} {
		if err := acc.Add(&v1.StreamEvent{Event: &v1.StreamEvent_Delta{Delta: d}}); err != nil {
			t.Fatal(err)
		}
	}
	got := modelir.Completion{Response: acc.Response()}.Reasoning()
	if got != "ab" || whole.GetReasoning().GetText() != "a" {
		t.Fatalf("accumulated %q, event now %q", got, whole.GetReasoning().GetText())
	}
}

func TestComparisonRules(t *testing.T) {
	j := func(s string) any { return decode(t, []byte(s)) }
	same := func(e, a string) bool { return len(differences(j(e), j(a), "$", nil)) == 0 }
	if !same(`{"x":0.1}`, `{"x":0.10000000149011612}`) || !same(`{"x":"NaN"}`, `{"x":"NaN"}`) ||
		!same(`{"x":"9007199254740993"}`, `{"x":9007199254740993}`) || !same(`{"timing":1}`, `{"timing":2}`) {
		t.Fatal("equal values compared unequal")
	}
	if same(`{"x":"9007199254740993"}`, `{"x":"9007199254740992"}`) || same(`{"x":0.1}`, `{"x":0.1001}`) ||
		same(`{"x":[1,2]}`, `{"x":[1]}`) || same(`{"x":1}`, `{}`) {
		t.Fatal("different values compared equal")
	}
	if len(differences(j(`{"response":{"a":{"b":1}}}`), j(`{"response":{"a":{"b":2}}}`), "$", map[string]bool{"a.b": true})) != 0 {
		t.Fatal("an ignored path was compared")
	}
}

// futureServer is a ModelService that reports an IR of another major version.
type futureServer struct {
	v1.UnimplementedModelServiceServer
}

func (futureServer) GetServerInfo(context.Context, *v1.GetServerInfoRequest) (*v1.GetServerInfoResponse, error) {
	return &v1.GetServerInfoResponse{IrVersion: "2.0.0"}, nil
}

func TestConnectRefusesAServerOfAnotherMajorVersion(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	v1.RegisterModelServiceServer(server, futureServer{})
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()
	var incompatible *modelir.IncompatibleServerError
	client, err := modelir.Connect(context.Background(), listener.Addr().String())
	if !errors.As(err, &incompatible) || client != nil || incompatible.ServerIRVersion != "2.0.0" {
		t.Fatalf("got %v, %v", client, err)
	}
}
