// Read a rollout's trajectory from its record file and print each turn (the README's trajectory program):
// go run ./examples/trajectory FILE
package main

import (
	"fmt"
	"log"
	"math"
	"os"

	"modelir.dev/go/modelir"
)

func main() {
	t, err := modelir.TrajectoryFromRecords(os.Args[1])
	if err != nil {
		log.Fatal(err) // a *modelir.TrajectoryDriftError names the turn whose prompt drifted
	}
	trained := 0
	for i, turn := range t.Turns {
		sum := 0.0
		for _, logprob := range t.Logprobs[turn.SampledStart:turn.End] {
			if !math.IsNaN(float64(logprob)) {
				sum += float64(logprob)
			}
		}
		trained += turn.End - turn.SampledStart
		fmt.Printf("turn %d: %d prompt tokens, %d sampled, logprob %.3f\n",
			i, turn.SampledStart-turn.PromptStart, turn.End-turn.SampledStart, sum)
	}
	fmt.Printf("%d tokens, %d to train on\n", len(t.Tokens), trained)
}
