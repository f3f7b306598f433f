// Generate a completion with logprobs and print the token ids (the README's example).
package main

import (
	"context"
	"fmt"
	"log"

	"modelir.dev/go/modelir"
	v1 "modelir.dev/go/modelir/v1"
)

func main() {
	ctx := context.Background()
	client, err := modelir.Connect(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	max := int32(8)
	response, err := client.Generate(ctx, &v1.Request{
		Model:          "reference",
		Input:          &v1.Request_Prompt{Prompt: "Once upon a time"},
		Sampling:       &v1.SamplingParams{MaxOutputTokens: &max},
		LogprobOptions: &v1.LogprobOptions{RequireTokenIds: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	lp := modelir.Completion{Response: response}.Logprobs()
	fmt.Println(lp.TokenIDs, lp.Logprobs)
}
