//! Shared by the Rust runner's tests: proto-JSON through prost-reflect, and the comparison rules of the service
//! conformance suite (conformance/README.md).
#![allow(dead_code)]
use prost_reflect::DynamicMessage;
use serde_json::Value;

/// A prost message as proto-JSON (camelCase names, int64 as strings, enums by name, defaults omitted).
pub fn to_json<M: prost::Message>(message: &M, full_name: &str) -> Value {
    let descriptor = modelir::descriptor_pool().get_message_by_name(full_name).expect("a modelir message");
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice()).expect("re-decodes");
    serde_json::to_value(&dynamic).expect("serializes")
}

/// A prost message from proto-JSON.
pub fn from_json<M: prost::Message + Default>(value: &Value, full_name: &str) -> M {
    let descriptor = modelir::descriptor_pool().get_message_by_name(full_name).expect("a modelir message");
    let dynamic = DynamicMessage::deserialize(descriptor, value.clone()).expect("valid proto-JSON");
    dynamic.transcode_to().expect("transcodes")
}

/// A JSON number, or a string proto-JSON uses for one: an exact integer (i128 covers int64 and uint64) or a float.
enum Number {
    Int(i128),
    Float(f64),
}

fn number(value: &Value) -> Option<Number> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .map(|i| Number::Int(i as i128))
            .or_else(|| n.as_u64().map(|u| Number::Int(u as i128)))
            .or_else(|| n.as_f64().map(Number::Float)),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(Number::Float(f64::NAN)),
            "Infinity" => Some(Number::Float(f64::INFINITY)),
            "-Infinity" => Some(Number::Float(f64::NEG_INFINITY)),
            _ if !s.is_empty() && s.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok().map(Number::Int)
            }
            _ => None,
        },
        _ => None,
    }
}

fn same_number(e: &Value, a: &Value) -> bool {
    let as_float = |n: &Number| match n {
        Number::Int(i) => *i as f64,
        Number::Float(f) => *f,
    };
    match (number(e), number(a)) {
        (Some(Number::Int(x)), Some(Number::Int(y))) => x == y,
        (Some(x), Some(y)) => {
            let (x, y) = (as_float(&x), as_float(&y));
            (x.is_nan() && y.is_nan()) || x as f32 == y as f32
        }
        _ => false,
    }
}

/// `$.stream[2].event.delta` -> `event.delta`: an ignore path is dotted from the root of one answer (the response,
/// each stream event, the accumulated response, the error), with no list indexes.
pub fn answer_path(at: &str) -> String {
    let rest = at.strip_prefix("$.").unwrap_or(at);
    // The `expect` key never holds a dot; a stream event's index comes before the first one.
    let rest = rest.find('.').map_or("", |i| &rest[i + 1..]);
    let mut out = String::with_capacity(rest.len());
    let mut in_index = false;
    for c in rest.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            _ if !in_index => out.push(c),
            _ => {}
        }
    }
    out
}

/// Where `actual` differs from `expected`, as JSON paths; `timing` and the `ignore` paths are skipped.
pub fn differences(expected: &Value, actual: &Value, path: &str, ignore: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let mut keys: Vec<&String> = e.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let at = format!("{path}.{key}");
                if key == "timing" || ignore.contains(&answer_path(&at)) {
                    continue;
                }
                match (e.get(key), a.get(key)) {
                    (Some(ev), None) => out.push(format!("{at}: missing (expected {ev})")),
                    (None, Some(av)) => out.push(format!("{at}: unexpected {av}")),
                    (Some(ev), Some(av)) => out.extend(differences(ev, av, &at, ignore)),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!("{path}: {} items, expected {}", a.len(), e.len()));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                out.extend(differences(ev, av, &format!("{path}[{i}]"), ignore));
            }
        }
        _ if expected == actual || same_number(expected, actual) => {}
        _ => out.push(format!("{path}: {actual}, expected {expected}")),
    }
    out
}
