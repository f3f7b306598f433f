//! The trajectory conformance vectors (conformance/trajectories, written by its write_vectors.py): every file read
//! with `Trajectory::from_records` and compared with expected.json, and the rule's refusals.
use std::path::PathBuf;

use modelir::{v1, Trajectory, TrajectoryError, TurnBoundary};
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../conformance/trajectories")
}

fn numbers<T>(value: &Value, read: impl Fn(&Value) -> T) -> Vec<T> {
    value.as_array().unwrap().iter().map(read).collect()
}

#[test]
fn every_trajectory_vector_reads_as_expected_json_says() {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(vectors().join("expected.json")).unwrap()).unwrap();
    for entry in manifest["files"].as_array().unwrap() {
        let name = entry["path"].as_str().unwrap();
        let got = Trajectory::from_records(vectors().join(name));
        if let Some(error) = entry.get("error") {
            match got {
                Err(TrajectoryError::Drift { turn, position, expected, found }) => assert_eq!(
                    (turn as i64, position as i64, i64::from(expected), i64::from(found)),
                    (
                        error["turn"].as_i64().unwrap(),
                        error["position"].as_i64().unwrap(),
                        error["expected"].as_i64().unwrap(),
                        error["found"].as_i64().unwrap()
                    ),
                    "{name}"
                ),
                other => panic!("{name}: {other:?}"),
            }
            continue;
        }
        let (got, want) = (got.unwrap_or_else(|e| panic!("{name}: {e}")), &entry["trajectory"]);
        assert_eq!(got.tokens, numbers(&want["tokens"], |x| x.as_i64().unwrap() as i32), "{name}");
        assert_eq!(got.loss_mask, numbers(&want["loss_mask"], |x| x.as_i64().unwrap() == 1), "{name}");
        // Logprobs are float32 on both sides; null is NaN.
        let logprobs: Vec<Option<f32>> = got.logprobs.iter().map(|x| (!x.is_nan()).then_some(*x)).collect();
        assert_eq!(logprobs, numbers(&want["logprobs"], |x| x.as_f64().map(|v| v as f32)), "{name}");
        let turns = numbers(&want["turns"], |t| TurnBoundary {
            prompt_start: t["prompt_start"].as_u64().unwrap() as usize,
            sampled_start: t["sampled_start"].as_u64().unwrap() as usize,
            end: t["end"].as_u64().unwrap() as usize,
        });
        assert_eq!(got.turns, turns, "{name}");
    }
}

fn turn(prompt: &[i32], sampled: &[i32]) -> v1::Response {
    v1::Response {
        prompt_token_ids: prompt.to_vec(),
        choices: vec![v1::Choice {
            sampled_tokens: Some(v1::SampledTokens { token_ids: sampled.to_vec(), ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn a_shorter_prompt_and_a_turn_without_prompt_ids_are_refused() {
    let shorter = Trajectory::from_responses(&[turn(&[1, 2], &[3, 4]), turn(&[1, 2, 3], &[6])]);
    assert!(matches!(shorter, Err(TrajectoryError::Drift { turn: 1, position: 3, expected: 4, found: -1 })));
    let unknown = Trajectory::from_responses(&[turn(&[1], &[2]), turn(&[], &[3])]);
    match unknown {
        Err(e @ TrajectoryError::Unreadable { turn: 1, .. }) => assert!(e.to_string().contains("prompt_token_ids")),
        other => panic!("{other:?}"),
    }
}
