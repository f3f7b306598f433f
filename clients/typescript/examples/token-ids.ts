// Generate a completion with logprobs and print the token ids (the README's example).
import { Completion, ModelirClient } from "../src/index";

const client = await ModelirClient.connect(process.argv[2] ?? "http://127.0.0.1:50051");
const response = await client.generate({
  model: "reference",
  input: { case: "prompt", value: "Once upon a time" },
  sampling: { maxOutputTokens: 8 },
  logprobOptions: { requireTokenIds: true },
});
const { tokenIds, logprobs } = new Completion(response).logprobs;
console.log(tokenIds, logprobs);
client.close();
