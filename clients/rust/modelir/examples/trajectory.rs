//! Read a rollout's trajectory from its record file and print each turn (the README's trajectory program):
//! `cargo run -p modelir --example trajectory -- FILE`.
fn main() -> Result<(), modelir::TrajectoryError> {
    let path = std::env::args().nth(1).expect("a record file");
    let t = modelir::Trajectory::from_records(path)?; // TrajectoryError::Drift names the turn whose prompt drifted
    for (i, turn) in t.turns.iter().enumerate() {
        let sum: f64 =
            t.logprobs[turn.sampled_start..turn.end].iter().filter(|x| !x.is_nan()).map(|&x| f64::from(x)).sum();
        let (prompt, sampled) = (turn.sampled_start - turn.prompt_start, turn.end - turn.sampled_start);
        println!("turn {i}: {prompt} prompt tokens, {sampled} sampled, logprob {sum:.3}");
    }
    println!("{} tokens, {} to train on", t.tokens.len(), t.loss_mask.iter().filter(|&&m| m).count());
    Ok(())
}
