// Read a rollout's trajectory from its record file and print each turn (the README's trajectory program):
// npx tsx examples/trajectory.ts FILE
import { trajectoryFromRecords } from "../src/index";

const { tokens, lossMask, logprobs, turns } = trajectoryFromRecords(process.argv[2]!); // throws TrajectoryDriftError
turns.forEach(({ promptStart, sampledStart, end }, i) => {
  const sum = logprobs.subarray(sampledStart, end).reduce((a, b) => (Number.isNaN(b) ? a : a + b), 0);
  console.log(`turn ${i}: ${sampledStart - promptStart} prompt tokens, ${end - sampledStart} sampled, logprob ${sum.toFixed(3)}`);
});
console.log(`${tokens.length} tokens, ${lossMask.reduce((a, b) => a + b, 0)} to train on`);
