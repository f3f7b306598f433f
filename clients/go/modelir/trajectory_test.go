package modelir_test

// The trajectory conformance vectors (conformance/trajectories, written by its write_vectors.py): every file read
// with TrajectoryFromRecords and compared with expected.json, and the rule's refusals.

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"modelir.dev/go/modelir"
	v1 "modelir.dev/go/modelir/v1"
)

type trajectoryEntry struct {
	Path       string `json:"path"`
	Trajectory *struct {
		Tokens   []int32    `json:"tokens"`
		LossMask []int      `json:"loss_mask"`
		Logprobs []*float64 `json:"logprobs"`
		Turns    []struct {
			PromptStart  int `json:"prompt_start"`
			SampledStart int `json:"sampled_start"`
			End          int `json:"end"`
		} `json:"turns"`
	} `json:"trajectory"`
	Error *modelir.TrajectoryDriftError `json:"error"`
}

func TestTrajectoryVectors(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "conformance", "trajectories")
	raw, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Files []trajectoryEntry `json:"files"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	for _, entry := range manifest.Files {
		t.Run(entry.Path, func(t *testing.T) {
			got, err := modelir.TrajectoryFromRecords(filepath.Join(dir, entry.Path))
			if entry.Error != nil {
				var drift *modelir.TrajectoryDriftError
				if !errors.As(err, &drift) || *drift != *entry.Error {
					t.Fatalf("got %v, want the drift %+v", err, *entry.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := entry.Trajectory
			if !reflect.DeepEqual(got.Tokens, want.Tokens) {
				t.Errorf("tokens differ")
			}
			if len(got.LossMask) != len(want.LossMask) || len(got.Logprobs) != len(want.Logprobs) {
				t.Fatalf("lengths: mask %d/%d, logprobs %d/%d", len(got.LossMask), len(want.LossMask), len(got.Logprobs), len(want.Logprobs))
			}
			for at, mask := range want.LossMask {
				if got.LossMask[at] != (mask == 1) {
					t.Errorf("loss_mask[%d] = %v", at, got.LossMask[at])
				}
				// Logprobs are float32 on both sides; null is NaN.
				if w := want.Logprobs[at]; (w == nil) != math.IsNaN(float64(got.Logprobs[at])) || (w != nil && float32(*w) != got.Logprobs[at]) {
					t.Errorf("logprobs[%d] = %v, want %v", at, got.Logprobs[at], w)
				}
			}
			turns := make([]modelir.TurnBoundary, len(want.Turns))
			for i, turn := range want.Turns {
				turns[i] = modelir.TurnBoundary{PromptStart: turn.PromptStart, SampledStart: turn.SampledStart, End: turn.End}
			}
			if !reflect.DeepEqual(got.Turns, turns) {
				t.Errorf("turns %v, want %v", got.Turns, turns)
			}
		})
	}
}

func turn(prompt, sampled []int32) *v1.Response {
	return &v1.Response{PromptTokenIds: prompt, Choices: []*v1.Choice{{SampledTokens: &v1.SampledTokens{TokenIds: sampled}}}}
}

func TestTrajectoryRefusals(t *testing.T) {
	_, err := modelir.NewTrajectory([]*v1.Response{turn([]int32{1, 2}, []int32{3, 4}), turn([]int32{1, 2, 3}, []int32{6})})
	var drift *modelir.TrajectoryDriftError
	if !errors.As(err, &drift) || *drift != (modelir.TrajectoryDriftError{Turn: 1, Position: 3, Expected: 4, Found: -1}) {
		t.Errorf("a shorter prompt: %v", err)
	}
	_, err = modelir.NewTrajectory([]*v1.Response{turn([]int32{1}, []int32{2}), turn(nil, []int32{3})})
	var refused *modelir.TrajectoryError
	if !errors.As(err, &refused) || refused.Turn != 1 || !strings.Contains(refused.Reason, "prompt_token_ids") {
		t.Errorf("no prompt ids: %v", err)
	}
}
