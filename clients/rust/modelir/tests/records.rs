//! The record conformance vectors (clients/testdata/records, described in its make_vectors.py): every file read
//! with `RecordReader` and compared with manifest.json.
use std::path::PathBuf;

use modelir::{ChoiceExt, RecordReader};
use prost::Message as _;
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/records")
}

#[test]
fn every_record_vector_reads_as_its_manifest_says() {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(vectors().join("manifest.json")).unwrap()).unwrap();
    for (name, want) in manifest.as_object().unwrap() {
        let mut reader = RecordReader::open(vectors().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reader.header.ir_version, want["irVersion"].as_str().unwrap(), "{name}");
        let records: Vec<_> = reader.by_ref().map(|r| r.unwrap()).collect();
        let expected = want["records"].as_array().unwrap();
        assert_eq!(records.len(), expected.len(), "{name}: records");
        assert_eq!(reader.skipped.len() as u64, want["skipped"].as_u64().unwrap(), "{name}: {:?}", reader.skipped);
        // A reader warns about a file of a newer minor version only (an older one holds nothing it does not know).
        let minor = |v: &str| v.split('.').nth(1).unwrap().parse::<u64>().unwrap();
        assert_eq!(
            reader.warnings.is_empty(),
            minor(want["irVersion"].as_str().unwrap()) <= minor(modelir::ir_version()),
            "{name}: {:?}",
            reader.warnings
        );
        for (i, (stored, w)) in records.iter().zip(expected).enumerate() {
            let text =
                stored.record.response.as_ref().and_then(|r| r.choices.first()).map(|c| c.text()).unwrap_or_default();
            assert_eq!(stored.record.key, w["key"].as_str().unwrap(), "{name} [{i}]");
            assert_eq!(i64::from(stored.record.status), w["status"].as_i64().unwrap(), "{name} [{i}]");
            assert_eq!(text, w["text"].as_str().unwrap(), "{name} [{i}]");
            if let Some(bytes) = want["recordBytes"].as_array() {
                // Every field kept: re-encoded, the record is the writer's bytes.
                let encoded = stored.message.encode_to_vec();
                assert_eq!(base64(&encoded), bytes[i].as_str().unwrap(), "{name} [{i}]: a field was lost");
            }
        }
    }
}

#[test]
fn another_major_and_a_file_without_a_header_are_refused() {
    let dir = std::env::temp_dir().join(format!("modelir-records-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("x.jsonl"), "{\"record\": {\"key\": \"a\"}}\n").unwrap();
    assert!(RecordReader::open(dir.join("x.jsonl")).is_err());
    std::fs::write(dir.join("y.jsonl"), "{\"header\": {\"irVersion\": \"2.0.0\"}}\n").unwrap();
    assert!(RecordReader::open(dir.join("y.jsonl")).is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Standard base64 with padding (the manifest's encoding), without a crate for one test.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// The spec's own record vectors (conformance/records, written by the Python SDK of each IR release), when present.
#[test]
fn every_spec_record_vector_reads_as_its_manifest_says() {
    let dir = vectors().join("../../../conformance/records");
    let Ok(raw) = std::fs::read_to_string(dir.join("manifest.json")) else { return };
    let manifest: Value = serde_json::from_str(&raw).unwrap();
    for want in manifest["files"].as_array().unwrap() {
        let name = want["path"].as_str().unwrap();
        let mut reader = RecordReader::open(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reader.format, want["format"].as_str().unwrap(), "{name}");
        assert_eq!(reader.header.ir_version, want["ir_version"].as_str().unwrap(), "{name}");
        for (key, value) in want["run_metadata"].as_object().unwrap() {
            assert_eq!(reader.header.run_metadata.get(key).map(String::as_str), value.as_str(), "{name}");
        }
        let seen: Vec<Value> = reader
            .by_ref()
            .map(|r| {
                let r = r.unwrap().record;
                let text = r.response.as_ref().and_then(|a| a.choices.first()).map(|c| c.text()).unwrap_or_default();
                // A record of an Embed call (IR 1.1) holds neither request nor response; this release reads its
                // embedding typed.
                if r.key == "embedded" {
                    assert!(r.request.is_none() && r.response.is_none(), "{name}");
                    assert_eq!(r.embed_response.as_ref().unwrap().embeddings[0].values, vec![0.6f32, -0.8], "{name}");
                }
                serde_json::json!({"key": r.key, "status": r.status, "text": text})
            })
            .collect();
        assert_eq!(&Value::Array(seen), &want["records"], "{name}");
        let torn = usize::from(want["torn_tail_bytes"].as_u64().unwrap() > 0);
        assert_eq!(reader.skipped.len(), torn, "{name}: {:?}", reader.skipped);
    }
}
