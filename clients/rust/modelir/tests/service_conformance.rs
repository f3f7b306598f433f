//! The Rust runner of the service conformance suite (conformance/service): every case through `modelir::Client`
//! against `modelir serve` on a free port, compared by the rules of conformance/README.md.
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{answer_path, differences, from_json, to_json};
use modelir::{v1, Accumulator, Client, Error};
use serde_json::{json, Map, Value};

fn suite() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../conformance/service")
}

/// `modelir serve` as `servers.json` describes it, on a free port; killed when dropped.
struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(name: &str) -> Server {
    let servers: Value = serde_json::from_str(&std::fs::read_to_string(suite().join("servers.json")).unwrap()).unwrap();
    let spec = &servers[name];
    let binary =
        std::env::var("MODELIR_BIN").map(PathBuf::from).unwrap_or_else(|_| suite().join("../../.venv/bin/modelir"));
    let mut command = Command::new(binary);
    command.args(["serve", "--host", "127.0.0.1", "--port", "0", "--grace", "0"]).current_dir(suite());
    command.args(spec["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()));
    for (key, value) in spec["env"].as_object().unwrap() {
        command.env(key, value.as_str().unwrap());
    }
    let mut child = command.stderr(Stdio::piped()).spawn().expect("modelir serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    while let Some(Ok(line)) = lines.next() {
        if let Some(port) = line.contains("modelir serving").then(|| line.rsplit(':').next()).flatten() {
            let address = format!("127.0.0.1:{}", port.trim());
            // Keep draining the log so the server never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Server(child, address);
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("modelir serve ({name}) exited before listening:\n{}", seen.join("\n"));
}

/// The servers to test instead of starting `modelir serve`: `MODELIR_CONFORMANCE_<NAME>=host:port` for each name of
/// servers.json the implementation under test serves; None when no address is given.
fn external_servers(getenv: impl Fn(&str) -> Option<String>) -> Option<Vec<(String, String)>> {
    let servers: Value = serde_json::from_str(&std::fs::read_to_string(suite().join("servers.json")).unwrap()).unwrap();
    let given: Vec<(String, String)> = servers
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|name| {
            getenv(&format!("MODELIR_CONFORMANCE_{}", name.to_uppercase()))
                .filter(|a| !a.is_empty())
                .map(|a| (name.clone(), a))
        })
        .collect();
    (!given.is_empty()).then_some(given)
}

#[test]
fn ignore_paths_start_at_each_answer() {
    let ignore = vec!["serverVersion".to_owned(), "event.delta.text".to_owned()];
    let expected = json!({"response": {"serverVersion": "1"}, "stream": [{"event": {"delta": {"text": "a"}}}]});
    let actual = json!({"response": {"serverVersion": "2"}, "stream": [{"event": {"delta": {"text": "b"}}}]});
    assert_eq!(differences(&expected, &actual, "$", &ignore), Vec::<String>::new());
    assert_eq!(answer_path("$.accumulated.choices[1].message.parts[0].text"), "choices.message.parts.text");
    let env = |name: &str| (name == "MODELIR_CONFORMANCE_OPEN").then(|| "127.0.0.1:50051".to_owned());
    assert_eq!(external_servers(env), Some(vec![("open".to_owned(), "127.0.0.1:50051".to_owned())]));
    assert_eq!(external_servers(|_| None), None);
}

fn error_json(error: Error) -> Value {
    let Error::Rpc(e) = error else { panic!("not an RPC error: {error}") };
    let mut out = Map::new();
    out.insert("code".into(), json!(e.code_name()));
    if let Some(info) = &e.error_info {
        let mut info_json = Map::new();
        for (key, value) in [("reason", &info.reason), ("domain", &info.domain)] {
            if !value.is_empty() {
                info_json.insert(key.into(), json!(value));
            }
        }
        if !info.metadata.is_empty() {
            info_json.insert("metadata".into(), json!(info.metadata));
        }
        out.insert("errorInfo".into(), Value::Object(info_json));
        out.insert("reason".into(), json!(e.reason));
    }
    if let Some(bad) = &e.bad_request {
        let violations: Vec<Value> = bad
            .field_violations
            .iter()
            .map(|v| {
                let mut one = Map::new();
                for (key, value) in [("field", &v.field), ("description", &v.description), ("reason", &v.reason)] {
                    if !value.is_empty() {
                        one.insert(key.into(), json!(value));
                    }
                }
                Value::Object(one)
            })
            .collect();
        out.insert("badRequest".into(), json!({ "fieldViolations": violations }));
    }
    if let Some(gaps) = &e.unsupported {
        out.insert("unsupportedCapabilities".into(), to_json(gaps, "modelir.v1.UnsupportedCapabilities"));
    }
    if let Some(retry) = &e.retry_info {
        // proto-JSON's Duration: seconds, with nine fractional digits when there are nanoseconds.
        let delay = retry.retry_delay.map(|d| match d.subsec_nanos() {
            0 => format!("{}s", d.as_secs()),
            nanos => format!("{}.{nanos:09}s", d.as_secs()),
        });
        out.insert("retryInfo".into(), delay.map_or_else(|| json!({}), |d| json!({ "retryDelay": d })));
    }
    Value::Object(out)
}

/// The case's call made `repeat` times (default once); the last answer.
async fn call(client: &Client, case: &Value) -> Value {
    let mut answer = Value::Null;
    for _ in 0..case["repeat"].as_u64().unwrap_or(1) {
        answer = call_once(client, case).await;
    }
    answer
}

async fn call_once(client: &Client, case: &Value) -> Value {
    let request = &case["request"];
    let answer = match case["rpc"].as_str().unwrap() {
        "Generate" => {
            let req: v1::GenerateRequest = from_json(request, "modelir.v1.GenerateRequest");
            client.generate(req.request.unwrap_or_default()).await.map(|response| {
                to_json(&v1::GenerateResponse { response: Some(response) }, "modelir.v1.GenerateResponse")
            })
        }
        "StreamGenerate" => {
            let req: v1::StreamGenerateRequest = from_json(request, "modelir.v1.StreamGenerateRequest");
            let mut stream = match client.stream(req.request.unwrap_or_default()).await {
                Ok(stream) => stream,
                Err(e) => return json!({ "error": error_json(e) }),
            };
            let (mut events, mut accumulator) = (Vec::new(), Accumulator::default());
            // A stream that fails after some events answers with them too.
            let failed = |events: Vec<Value>, e: Error| match events.is_empty() {
                true => json!({ "error": error_json(e) }),
                false => json!({ "stream": events, "error": error_json(e) }),
            };
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => return failed(events, e),
                };
                let wrapped = v1::StreamGenerateResponse { event: Some(event.clone()) };
                events.push(to_json(&wrapped, "modelir.v1.StreamGenerateResponse"));
                accumulator.add(event).unwrap();
                if case["cancelAfterEvents"].as_u64() == Some(events.len() as u64) {
                    return failed(events, stream.cancel());
                }
            }
            return json!({
                "stream": events,
                "accumulated": to_json(&accumulator.response(), "modelir.v1.Response"),
            });
        }
        "Tokenize" => client
            .tokenize(from_json(request, "modelir.v1.TokenizeRequest"))
            .await
            .map(|r| to_json(&r, "modelir.v1.TokenizeResponse")),
        "Detokenize" => {
            let req: v1::DetokenizeRequest = from_json(request, "modelir.v1.DetokenizeRequest");
            client
                .detokenize(&req.model, req.token_ids)
                .await
                .map(|text| to_json(&v1::DetokenizeResponse { text }, "modelir.v1.DetokenizeResponse"))
        }
        "ListModels" => client
            .list_models()
            .await
            .map(|models| to_json(&v1::ListModelsResponse { models }, "modelir.v1.ListModelsResponse")),
        "Validate" => {
            let req: v1::ValidateRequest = from_json(request, "modelir.v1.ValidateRequest");
            client.validate(req.request.unwrap_or_default()).await.map(|r| to_json(&r, "modelir.v1.ValidateResponse"))
        }
        "GetServerInfo" => client.server_info().await.map(|r| to_json(&r, "modelir.v1.GetServerInfoResponse")),
        "Embed" => client
            .embed(from_json(request, "modelir.v1.EmbedRequest"))
            .await
            .map(|r| to_json(&r, "modelir.v1.EmbedResponse")),
        other => panic!("unknown rpc {other}"),
    };
    match answer {
        Ok(response) => json!({ "response": response }),
        Err(e) => json!({ "error": error_json(e) }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_case_passes() {
    let mut started = Vec::new();
    let addresses = external_servers(|name| std::env::var(name).ok()).unwrap_or_else(|| {
        let servers: Value =
            serde_json::from_str(&std::fs::read_to_string(suite().join("servers.json")).unwrap()).unwrap();
        let names: Vec<String> = servers.as_object().unwrap().keys().cloned().collect();
        started = names.iter().map(|name| start_server(name)).collect();
        names.into_iter().zip(started.iter().map(|server| server.1.clone())).collect()
    });
    let address = |name: &str| addresses.iter().find(|(n, _)| n == name).map(|(_, a)| a.clone());
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite().join("cases"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no service cases found");
    let (mut failures, mut skipped) = (Vec::new(), 0);
    for file in &files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let Some(server) = address(case["server"].as_str().unwrap()) else {
            skipped += 1; // no address given for this case's server
            continue;
        };
        let deadline = Duration::from_millis(case["deadlineMs"].as_u64().unwrap_or(30_000));
        let client = Client::dial(&server, case["token"].as_str()).await.unwrap().with_timeout(deadline);
        let ignore: Vec<String> = case["ignore"]
            .as_array()
            .map(|a| a.iter().map(|i| i.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        let problems = differences(&case["expect"], &call(&client, &case).await, "$", &ignore);
        if !problems.is_empty() {
            failures.push(format!("{}:\n  {}", file.display(), problems.join("\n  ")));
        }
        // After a cancelled call the server must answer the next one as usual.
        if case.get("cancelAfterEvents").is_some() && client.server_info().await.is_err() {
            failures.push(format!("{}: the server does not answer after the cancelled call", file.display()));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), files.len(), failures.join("\n"));
    if skipped > 0 {
        eprintln!("{skipped} cases skipped: no address given for their server");
    }
    // The handshake accepts a server of the same IR major version.
    if let Some(open) = address("open") {
        Client::connect(&open, None).await.expect("the same major version is accepted");
    }
}
