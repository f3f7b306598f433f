//! Unit tests of the Rust client: the IR version rule, typed errors, accessors, accumulation, comparison.
mod common;

use modelir::{
    check_compatible, ir_version, major, v1, Accumulator, ChoiceExt, Completion, Error, ErrorKind, RpcError,
    StreamOrderError,
};
use prost::Message as _;
use serde_json::json;
use v1::part_delta::Content as Delta;
use v1::stream_event::Event;

#[test]
fn the_ir_version_is_read_from_the_descriptors() {
    assert!(major(ir_version()).is_some(), "{}", ir_version());
}

#[test]
fn this_client_accepts_any_minor_of_its_major() {
    assert_eq!(ir_version(), "1.1.0");
    for server in ["1.0.0", "1.1.0", "1.4.2"] {
        check_compatible(server, ir_version()).unwrap();
    }
    for server in ["2.0.0", "0.9.0"] {
        assert!(check_compatible(server, ir_version()).is_err(), "{server}");
    }
}

#[test]
fn another_major_is_refused_with_a_clear_error() {
    check_compatible("1.9.0", "1.0.0").unwrap();
    for server in ["2.0.0", "0.9.0", "", "1.0"] {
        let error = check_compatible(server, "1.0.0").unwrap_err();
        assert!(matches!(error, Error::IncompatibleServer { .. }));
        assert!(error.to_string().contains("major versions differ"), "{error}");
    }
}

fn any<M: prost::Message>(type_name: &str, message: &M) -> prost_types::Any {
    prost_types::Any { type_url: format!("type.googleapis.com/{type_name}"), value: message.encode_to_vec() }
}

#[test]
fn rich_status_details_decode_into_typed_errors() {
    let info = tonic_types::pb::ErrorInfo {
        reason: "UNSUPPORTED_CAPABILITY".into(),
        domain: "modelir.dev".into(),
        metadata: Default::default(),
    };
    let gaps = v1::UnsupportedCapabilities {
        model: "m".into(),
        missing: vec![v1::Capability::Fim as i32],
        ..Default::default()
    };
    let status = tonic_types::pb::Status {
        code: tonic::Code::FailedPrecondition as i32,
        message: "no fim".into(),
        details: vec![any("google.rpc.ErrorInfo", &info), any("modelir.v1.UnsupportedCapabilities", &gaps)],
    };
    let error = RpcError::from(tonic::Status::with_details(
        tonic::Code::FailedPrecondition,
        "no fim",
        status.encode_to_vec().into(),
    ));
    assert_eq!(error.kind(), ErrorKind::UnsupportedCapability);
    assert_eq!(error.code_name(), "FAILED_PRECONDITION");
    assert_eq!(error.unsupported.unwrap().missing, vec![v1::Capability::Fim as i32]);

    let bare = RpcError::from(tonic::Status::unavailable("down"));
    assert_eq!((bare.reason.as_str(), bare.kind()), ("UNAVAILABLE", ErrorKind::Other));
}

fn delta(part: i32, content: Delta, logprobs: Option<v1::TokenLogprobs>) -> v1::StreamEvent {
    v1::StreamEvent {
        event: Some(Event::Delta(v1::PartDelta {
            part_index: part,
            content: Some(content),
            logprobs,
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[test]
fn accumulation_rebases_offsets_and_the_end_wins() {
    let first = v1::TokenLogprobs {
        token_ids: vec![104],
        token_logprobs: vec![-0.5],
        token_bytes: b"h".to_vec(),
        token_byte_offsets: vec![0],
        basis: v1::LogprobBasis::PostSampling as i32,
        ..Default::default()
    };
    let second = v1::TokenLogprobs {
        token_ids: vec![195, 169],
        token_logprobs: vec![-1.0, -2.0],
        token_bytes: "é".as_bytes().to_vec(),
        token_byte_offsets: vec![0, 1],
        ..Default::default()
    };
    let call = |id: &str, name: &str, args: &str| {
        Delta::ToolCall(v1::ToolCallDelta { id: id.into(), name: name.into(), arguments_json: args.into() })
    };
    let events = vec![
        v1::StreamEvent {
            event: Some(Event::Start(v1::StreamStart { id: "a".into(), model: "m".into(), ..Default::default() })),
            ..Default::default()
        },
        delta(0, Delta::Text("h".into()), Some(first)),
        delta(0, Delta::Text("é".into()), Some(second)),
        delta(1, call("c", "f", "{\"a\":"), None),
        delta(1, call("", "", "1}"), None),
        v1::StreamEvent {
            event: Some(Event::End(v1::StreamEnd {
                id: "b".into(),
                finishes: vec![v1::ChoiceFinish { finish_reason: v1::FinishReason::Stop as i32, ..Default::default() }],
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    let mut accumulator = Accumulator::default();
    for event in events {
        accumulator.add(event).unwrap();
    }
    let response = accumulator.response();
    let choice = response.first();
    assert_eq!((response.id.as_str(), response.model.as_str()), ("b", "m"));
    assert_eq!(choice.text(), "hé");
    assert_eq!(choice.text_from_bytes(), "hé");
    assert_eq!(choice.tool_calls()[0].arguments_json, "{\"a\":1}");
    let lp = choice.logprobs();
    assert_eq!(lp.token_ids, &[104, 195, 169]);
    assert_eq!(lp.token_bytes(), vec![&b"h"[..], &[195][..], &[169][..]]);
    assert_eq!(choice.logprobs.as_ref().unwrap().basis, v1::LogprobBasis::PostSampling as i32);
    assert_eq!(choice.message.as_ref().unwrap().role, v1::Role::Assistant as i32);
    assert_eq!(choice.finish_reason, v1::FinishReason::Stop as i32);
    assert!(accumulator.ended);
}

#[test]
fn a_skipped_part_is_an_error() {
    let mut accumulator = Accumulator::default();
    let error = accumulator.add(delta(2, Delta::Text("x".into()), None)).unwrap_err();
    assert_eq!(error, StreamOrderError { choice_index: 0, part_index: 2, parts: 0 });
}

/// The hand-written streams of clients/testdata (the rules of stream.proto), folded and compared by the suite's
/// rules.
#[test]
fn the_accumulation_vectors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/stream_accumulation.json");
    let vectors: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in vectors["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut accumulator = Accumulator::default();
        let folded: Result<(), StreamOrderError> = case["events"]
            .as_array()
            .unwrap()
            .iter()
            .try_for_each(|event| accumulator.add(common::from_json(event, "modelir.v1.StreamEvent")));
        if let Some(error) = case["error"].as_str() {
            let failure = folded.expect_err(name);
            assert!(failure.to_string().contains(error), "{name}: {failure}");
            continue;
        }
        folded.expect(name);
        assert!(accumulator.ended, "{name}");
        let response = accumulator.response();
        let problems =
            common::differences(&case["response"], &common::to_json(&response, "modelir.v1.Response"), "$", &[]);
        assert!(problems.is_empty(), "{name}:\n{}", problems.join("\n"));
        let (ids, parts) = response.first().sampled_tokens();
        assert!(parts.is_empty() || ids.len() == parts.len(), "{name}");
        if name == "every_rule" {
            assert_eq!(response.first().refusal(), "I cannot.");
        }
    }
}

#[test]
fn the_comparison_rules() {
    let same = |e, a| common::differences(&e, &a, "$", &[]).is_empty();
    assert!(same(json!({"x": 0.1}), json!({"x": 0.10000000149011612})));
    assert!(same(json!({"x": "NaN"}), json!({"x": "NaN"})));
    assert!(same(json!({"x": "9007199254740993"}), json!({"x": 9007199254740993u64})));
    assert!(!same(json!({"x": "9007199254740993"}), json!({"x": "9007199254740992"})));
    assert!(!same(json!({"x": 0.1}), json!({"x": 0.1001})));
    assert!(!same(json!({"x": [1, 2]}), json!({"x": [1]})));
    assert!(!same(json!({"x": 1}), json!({})));
    assert!(same(json!({"timing": 1}), json!({"timing": 2})));
    assert!(common::differences(
        &json!({"response": {"a": {"b": 1}}}),
        &json!({"response": {"a": {"b": 2}}}),
        "$",
        &["a.b".into()]
    )
    .is_empty());
}
